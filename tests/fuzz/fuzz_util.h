#pragma once
// Shared by the fuzz targets (tests/fuzz/, docs/fuzzing.md): an invariant check that aborts
// (libFuzzer and the replay executables both report an abort as a failure, with the input)
// and a reader that takes the fuzzer's bytes as a sequence of small decisions.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// An invariant of the code under test: on failure, name it and abort.
#define FUZZ_CHECK(cond, what)                                                                    \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                         what);                                                                   \
            std::abort();                                                                         \
        }                                                                                         \
    } while (0)

namespace oppsched::fuzz {

// Consumes the input from the front; past the end every read gives zeros (so every input,
// however short, is a complete program of decisions).
class input_reader final {
  public:
    input_reader(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
    bool empty() const { return pos_ >= n_; }
    std::size_t remaining() const { return pos_ < n_ ? n_ - pos_ : 0; }
    std::uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
    // Big-endian. Each read is its own statement: the operands of | are unsequenced, and gcc
    // and clang order them differently, so the replay build would read another program.
    std::uint16_t u16() {
        const std::uint16_t hi = u8();
        return static_cast<std::uint16_t>((hi << 8) | u8());
    }
    std::uint32_t u32() {
        const std::uint32_t hi = u16();
        return (hi << 16) | u16();
    }
    std::uint64_t u64() {
        const std::uint64_t hi = u32();
        return (hi << 32) | u32();
    }
    bool boolean() { return (u8() & 1u) != 0; }
    // A soft value as the air might give it to a decoder: as_float, four bytes taken as a
    // float32 (NaN, inf, denormals and all); else one signed byte divided by int8_scale.
    float soft_value(bool as_float, float int8_scale) {
        if (as_float) {
            const std::uint32_t u = u32();
            float x;
            std::memcpy(&x, &u, sizeof x);
            return x;
        }
        return static_cast<float>(static_cast<std::int8_t>(u8())) / int8_scale;
    }
    // Up to `max` bytes (fewer if the input ends).
    std::vector<std::uint8_t> bytes(std::size_t max) {
        const std::size_t k = max < remaining() ? max : remaining();
        std::vector<std::uint8_t> v(p_ + pos_, p_ + pos_ + k);
        pos_ += k;
        return v;
    }

  private:
    const std::uint8_t* p_;
    std::size_t n_;
    std::size_t pos_ = 0;
};

}  // namespace oppsched::fuzz
