#pragma once
// The per-run PDU integrity tag (docs/security.md, "The radio link"): a keyed MAC over each
// downlink TB, so that a transmitter in radio range that does not hold the run's key cannot
// make a client accept a TB. The PHY's CRC-32 and the PDU header's CRC detect noise only.
//
//   TB = MAC PDU (pdu.h, tb_bytes - kTagBytes bytes) || SipHash-2-4(key, MAC PDU) (8 bytes)
//
// SipHash-2-4 (Aumasson & Bernstein) is libsodium's crypto_shorthash: a 64-bit PRF keyed
// with 128 bits, built for short inputs; forging a tag without the key succeeds with
// probability 2^-64 per try. The tag does not stop a replay of a whole TB (the MAC PDU's
// sequence numbers make a replayed segment a duplicate the reassembler drops) nor jamming.
//
// Cost: kTagBytes per TB (a TB of B bytes carries B - 8 bytes of MAC PDU); docs/security.md
// has the figures per MCS.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oppsched::integrity {

constexpr std::size_t kTagBytes = 8;   // crypto_shorthash_BYTES
constexpr std::size_t kKeyBytes = 16;  // crypto_shorthash_KEYBYTES
using tag_key = std::array<std::uint8_t, kKeyBytes>;

// The tag of data[0, len).
std::array<std::uint8_t, kTagBytes> tag_of(const tag_key& key, const std::uint8_t* data,
                                           std::size_t len);

// Appends the tag of `tb` (all its current bytes) to it.
void append_tag(const tag_key& key, std::vector<std::uint8_t>& tb);

// true iff tb is at least kTagBytes long and its last kTagBytes bytes are the tag of the
// bytes before them (constant-time comparison). The protected payload is then
// tb[0, len - kTagBytes).
bool verify(const tag_key& key, const std::uint8_t* tb, std::size_t len);

// A key from its text form: 32 hexadecimal digits (surrounding white space ignored).
// Throws std::invalid_argument saying what is wrong (never echoing the key).
tag_key key_from_hex(const std::string& text);
// 32 lower-case hexadecimal digits.
std::string key_to_hex(const tag_key& key);
// A fresh random key (libsodium's randombytes).
tag_key random_key();

}  // namespace oppsched::integrity
