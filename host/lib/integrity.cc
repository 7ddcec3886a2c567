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

tag_key key_from_hex(const std::string& text) {
    std::size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    if (e - b != 2 * kKeyBytes)
        throw std::invalid_argument("an integrity key is " + std::to_string(2 * kKeyBytes) +
                                    " hexadecimal digits, this one has " + std::to_string(e - b) +
                                    " characters");
    tag_key k{};
    std::size_t bin_len = 0;
    if (sodium_hex2bin(k.data(), k.size(), text.data() + b, e - b, nullptr, &bin_len, nullptr) !=
            0 ||
        bin_len != kKeyBytes)
        throw std::invalid_argument("an integrity key is hexadecimal digits only");
    return k;
}

std::string key_to_hex(const tag_key& key) {
    char hex[2 * kKeyBytes + 1];
    sodium_bin2hex(hex, sizeof hex, key.data(), key.size());
    return std::string(hex, 2 * kKeyBytes);
}

tag_key random_key() {
    init_sodium();
    tag_key k{};
    randombytes_buf(k.data(), k.size());
    return k;
}

}  // namespace oppsched::integrity
