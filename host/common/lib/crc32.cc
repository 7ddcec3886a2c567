// CRC-32 (IEEE 802.3): see oppsched/crc32.h.
#include "oppsched/crc32.h"

#include <array>
#include <cstring>

namespace oppsched {
namespace {

using crc_tables = std::array<std::array<std::uint32_t, 256>, 8>;

// Slicing-by-8 tables: t[0] is the classic byte table; t[k][b] is the CRC of byte b
// followed by k zero bytes, so eight bytes are folded with eight independent lookups.
constexpr crc_tables make_tables() {
    crc_tables t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t c = b;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kCrc32Polynomial : c >> 1;
        t[0][b] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::size_t b = 0; b < 256; ++b)
            t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    return t;
}

constexpr crc_tables kTables = make_tables();
static_assert(kTables[0][1] == 0x77073096u, "CRC-32 table entry 1 (zlib)");
static_assert(kTables[0][255] == 0x2D02EF8Du, "CRC-32 table entry 255 (zlib)");

}  // namespace

std::uint32_t crc32(const std::uint8_t* p, std::size_t n, std::uint32_t crc) {
    std::uint32_t c = ~crc;
    // Bytes are combined explicitly (little-endian order by construction), so the result
    // does not depend on the host's byte order or on alignment.
    while (n >= 8) {
        const std::uint32_t lo = c ^ (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 |
                                      std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24);
        c = kTables[7][lo & 0xFFu] ^ kTables[6][(lo >> 8) & 0xFFu] ^
            kTables[5][(lo >> 16) & 0xFFu] ^ kTables[4][lo >> 24] ^ kTables[3][p[4]] ^
            kTables[2][p[5]] ^ kTables[1][p[6]] ^ kTables[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFFu];
    return ~c;
}

std::uint32_t crc32_bitwise(const std::uint8_t* p, std::size_t n, std::uint32_t crc) {
    std::uint32_t c = ~crc;
    for (std::size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kCrc32Polynomial : c >> 1;
    }
    return ~c;
}

}  // namespace oppsched
