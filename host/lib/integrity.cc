// The per-run PDU integrity tag: see oppsched/integrity.h.
#include "oppsched/integrity.h"

#include <sodium.h>

#include <cctype>
#include <stdexcept>

namespace oppsched::integrity {

static_assert(kTagBytes == crypto_shorthash_BYTES, "SipHash-2-4 gives 8 bytes");
static_assert(kKeyBytes == crypto_shorthash_KEYBYTES, "SipHash-2-4 takes a 16-byte key");

namespace {
void init_sodium() {
    // Idempotent and thread-safe; needed before randombytes (and harmless for shorthash).
    if (sodium_init() < 0) throw std::runtime_error("libsodium: sodium_init failed");
}
}  // namespace

std::array<std::uint8_t, kTagBytes> tag_of(const tag_key& key, const std::uint8_t* data,
                                           std::size_t len) {
    std::array<std::uint8_t, kTagBytes> tag{};
    crypto_shorthash(tag.data(), data, len, key.data());
    return tag;
}

void append_tag(const tag_key& key, std::vector<std::uint8_t>& tb) {
    const auto tag = tag_of(key, tb.data(), tb.size());
    tb.insert(tb.end(), tag.begin(), tag.end());
}

bool verify(const tag_key& key, const std::uint8_t* tb, std::size_t len) {
    if (len < kTagBytes) return false;
    const std::size_t n = len - kTagBytes;
    const auto tag = tag_of(key, tb, n);
    return sodium_memcmp(tag.data(), tb + n, kTagBytes) == 0;
}

namespace {
// 16 bytes from 32 hexadecimal digits; `what` names the thing in errors (never its value).
std::array<std::uint8_t, 16> bytes16_from_hex(const std::string& text, const char* what) {
    std::size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    if (e - b != 32)
        throw std::invalid_argument(std::string(what) + " is 32 hexadecimal digits, this one has " +
                                    std::to_string(e - b) + " characters");
    std::array<std::uint8_t, 16> k{};
    std::size_t bin_len = 0;
    if (sodium_hex2bin(k.data(), k.size(), text.data() + b, e - b, nullptr, &bin_len, nullptr) !=
            0 ||
        bin_len != k.size())
        throw std::invalid_argument(std::string(what) + " is hexadecimal digits only");
    return k;
}

std::string hex16(const std::array<std::uint8_t, 16>& v) {
    char hex[33];
    sodium_bin2hex(hex, sizeof hex, v.data(), v.size());
    return std::string(hex, 32);
}
}  // namespace

static_assert(kKeyBytes == 16 && kRunIdBytes == 16, "bytes16_from_hex reads both");
static_assert(kKeyBytes >= crypto_generichash_KEYBYTES_MIN &&
                  kKeyBytes >= crypto_generichash_BYTES_MIN,
              "BLAKE2b takes the testbed key and gives a tag key");

tag_key key_from_hex(const std::string& text) { return bytes16_from_hex(text, "an integrity key"); }

std::string key_to_hex(const tag_key& key) { return hex16(key); }

run_id run_id_from_hex(const std::string& text) {
    return bytes16_from_hex(text, "an integrity run id");
}

std::string run_id_to_hex(const run_id& run) { return hex16(run); }

tag_key run_key(const tag_key& testbed_key, const run_id& run, link_direction d) {
    // A fixed context, so that this key is never the output of another use of the testbed key.
    static constexpr char kContext[] = "oppsched tb key v1";
    std::array<std::uint8_t, sizeof kContext - 1 + 1 + kRunIdBytes> in{};
    std::size_t n = 0;
    for (std::size_t i = 0; i + 1 < sizeof kContext; ++i)
        in[n++] = static_cast<std::uint8_t>(kContext[i]);
    in[n++] = static_cast<std::uint8_t>(d);
    for (auto b : run) in[n++] = b;
    tag_key out{};
    if (crypto_generichash(out.data(), out.size(), in.data(), in.size(), testbed_key.data(),
                           testbed_key.size()) != 0)
        throw std::runtime_error("libsodium: crypto_generichash failed");
    return out;
}

tag_key random_key() {
    init_sodium();
    tag_key k{};
    randombytes_buf(k.data(), k.size());
    return k;
}

}  // namespace oppsched::integrity
