#pragma once
// The per-run PDU integrity tag (docs/security.md, "Forged and replayed TBs"): a keyed MAC
// over each TB, downlink (the apd's, checked by the client) and uplink (a station's, checked
// by the apd's medium), so that a transmitter in radio range that does not hold the run's key
// cannot make either side accept a TB. The PHY's CRC-32 and the PDU header's CRC detect
// noise only.
//
//   TB = MAC PDU (pdu.h, tb_bytes - kTagBytes bytes) || SipHash-2-4(k, MAC PDU) (8 bytes)
//   k  = run_key(testbed key, run id, direction)
//
// SipHash-2-4 (Aumasson & Bernstein) is libsodium's crypto_shorthash: a 64-bit PRF keyed
// with 128 bits, built for short inputs; forging a tag without the key succeeds with
// probability 2^-64 per try.
//
// The key k is not the testbed's long-term key (integrity.key, kept for months) but one
// derived from it for one run and one direction: BLAKE2b (libsodium's crypto_generichash,
// keyed with the testbed key, 16-byte output) over a context string, the direction and the
// run's 16-byte random id, which the runner draws for every run and gives to both daemons.
// So a TB recorded in another run with the same testbed key fails the check (probability
// 2^-64 of passing) and can never carry its MAC session trailer (pdu.h) into this run: the
// client cannot be made to adopt an old session and drop its buffer. Separate directions
// keep a station's uplink TB from passing as a downlink TB, and back. Within a run, a
// replay of a whole TB passes the tag: the MAC PDU's sequence numbers make its segments
// duplicates the reassembler drops, and its session trailer is the session the client holds
// (docs/security.md, "What does not (yet)"). The tag does not stop jamming either.
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
constexpr std::size_t kRunIdBytes = 16;  // 128 random bits: two runs never draw the same
using run_id = std::array<std::uint8_t, kRunIdBytes>;

// Which way a TB goes: part of the derived key, so a TB of one cannot pass as the other.
enum class link_direction : std::uint8_t { downlink = 0, uplink = 1 };

// The tag key of one direction of one run (above): BLAKE2b-128 keyed with `testbed_key` over
// "oppsched tb key v1" || direction (1 byte) || run. Deterministic: the apd and every client
// derive the same key from the same inputs.
tag_key run_key(const tag_key& testbed_key, const run_id& run, link_direction d);

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

// A run id from its text form: 32 hexadecimal digits (surrounding white space ignored).
// Throws std::invalid_argument saying what is wrong.
run_id run_id_from_hex(const std::string& text);
std::string run_id_to_hex(const run_id& run);

}  // namespace oppsched::integrity
