#pragma once
// CRC-32 of IEEE 802.3 (Ethernet FCS, zlib, PNG): reflected polynomial 0xEDB88320
// (0x04C11DB7 normal form), initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF.
// Known answer: crc32("123456789") == 0xCBF43926. Identical to boost::crc_32_type and
// zlib's crc32(), which the tests check.
//
// The one definition used by the MAC PDU (oppsched/pdu.h) and the PHY (gr-oppsched's
// per-TB CRC). Table-driven, slicing-by-8 (eight 256-entry tables, 8 KiB, built at compile
// time): about 1 cycle per byte, no allocation, no global mutable state.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace oppsched {

constexpr std::uint32_t kCrc32Polynomial = 0xEDB88320u;  // reflected 0x04C11DB7

// CRC-32 of `len` bytes. Chaining: crc32(b, nb, crc32(a, na)) == crc32(a ++ b), like zlib
// (the `crc` argument is the previous *final* CRC, 0 to start).
std::uint32_t crc32(const std::uint8_t* data, std::size_t len, std::uint32_t crc = 0);
inline std::uint32_t crc32(const std::vector<std::uint8_t>& data, std::uint32_t crc = 0) {
    return crc32(data.data(), data.size(), crc);
}

// Bit-at-a-time reference implementation (slow; for tests only).
std::uint32_t crc32_bitwise(const std::uint8_t* data, std::size_t len, std::uint32_t crc = 0);

}  // namespace oppsched
