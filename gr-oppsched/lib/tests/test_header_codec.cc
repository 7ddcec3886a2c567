// Control-header codec: wire format (golden bytes), round trips over the slot geometries,
// robustness at low SNR, and rejection of garbage without crashing.
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/mcs.h>
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>

#include "fec_test_util.h"

using namespace gr::oppsched;
using namespace fec_test;

namespace {
numerology with_header_symbols(int h, const char* profile = "evdo", double fs = 1e6) {
    auto p = numerology::profile(profile, fs).params();
    p.header_symbols = h;
    return numerology(p);
}

header_fields random_fields(std::mt19937_64& rng, const numerology& n) {
    header_fields h;
    h.user = static_cast<std::uint16_t>(rng());
    h.mcs = static_cast<std::uint8_t>(rng() % 8);
    h.harq_process = static_cast<std::uint8_t>(rng() % 16);
    h.ndi = rng() & 1;
    h.rv = static_cast<std::uint8_t>(rng() % 4);
    h.tb_bytes = static_cast<std::uint16_t>(rng() % (mcs_set::tb_bytes(h.mcs, n) + 1));
    h.slot = static_cast<std::uint32_t>(rng());
    return h;
}

const header_fields k_golden_fields = {0x1234, 5, 0xA, true, 2, 0x0102, 0xDEADBEEF};
// bits: user | mcs | harq | ndi | rv | tb_bytes | slot | uplink 0 | 0000 | CRC-16/CCITT-FALSE
const std::array<std::uint8_t, 12> k_golden_bytes = {0x12, 0x34, 0x5a, 0xc0, 0x20, 0x5b,
                                                     0xd5, 0xb7, 0xdd, 0xe0, 0xd2, 0x7c};
}  // namespace

TEST(HeaderCodec, packs_the_fields_into_the_documented_12_byte_layout) {
    header_codec c(numerology::profile("3ms", 5e6));  // tb_bytes 258 fits MCS 5 there
    EXPECT_EQ(c.pack(k_golden_fields), k_golden_bytes);
    const auto r = c.unpack(k_golden_bytes.data());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.value(), k_golden_fields);
}

TEST(HeaderCodec, carries_the_uplink_direction_in_bit_75) {
    header_codec c(numerology::profile("3ms", 5e6));
    header_fields up = k_golden_fields;
    up.uplink = true;
    auto want = k_golden_bytes;
    want[9] |= 0x10;  // bit 75: the fourth bit of byte 9, after the slot's last three
    const std::uint16_t crc = header_codec::crc16(want.data(), 10);
    want[10] = static_cast<std::uint8_t>(crc >> 8);
    want[11] = static_cast<std::uint8_t>(crc);
    EXPECT_EQ(c.pack(up), want);
    const auto r = c.unpack(want.data());
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_TRUE(r.value().uplink);
    EXPECT_EQ(r.value(), up);
    EXPECT_NE(r.value(), k_golden_fields);  // the direction is part of the header's identity
    // through the air interface: encoded, decoded
    std::vector<gr_complex> re(c.resource_elements());
    c.encode(up, re.data());
    std::vector<float> nvar(re.size(), 0.01f);
    const auto d = c.decode(re.data(), nvar.data(), re.size());
    ASSERT_TRUE(d.ok()) << d.error();
    EXPECT_TRUE(d.value().uplink);
}

TEST(HeaderCodec, uses_bpsk_when_the_header_res_hold_192_coded_bits_else_qpsk) {
    const struct {
        int symbols;
        int bps;
    } cases[] = {{2, 2}, {3, 2}, {4, 1}, {6, 1}};
    for (const auto& c : cases) {
        const auto n = with_header_symbols(c.symbols);
        header_codec h(n);
        EXPECT_EQ(h.bits_per_symbol(), c.bps) << c.symbols;
        EXPECT_EQ(h.resource_elements(), static_cast<std::size_t>(c.symbols * 48));
        EXPECT_EQ(h.encode(header_fields{}).size(), h.resource_elements());
    }
    try {
        header_codec h(with_header_symbols(1));
        FAIL() << "one header symbol accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("numerology.header_symbols: 1"), std::string::npos)
            << e.what();
    }
}

TEST(HeaderCodec, round_trips_every_geometry_noiseless_and_at_6_db) {
    std::mt19937_64 rng(100);
    for (int hs : {2, 3, 4, 6}) {
        for (const char* prof : {"evdo", "3ms"}) {
            for (double fs : {1e6, 5e6}) {
                const auto n = with_header_symbols(hs, prof, fs);
                header_codec c(n);
                for (int t = 0; t < 10; ++t) {
                    const auto f = random_fields(rng, n);
                    auto re = c.encode(f);
                    auto r = c.decode(re, std::vector<float>(re.size(), 0.01f));
                    ASSERT_TRUE(r.ok()) << r.error();
                    EXPECT_EQ(r.value(), f);
                    add_awgn(re, n0_of_snr_db(6.0), rng);
                    r = c.decode(re, std::vector<float>(re.size(), n0_of_snr_db(6.0)));
                    ASSERT_TRUE(r.ok()) << hs << " symbols: " << r.error();
                    EXPECT_EQ(r.value(), f);
                }
            }
        }
    }
}

TEST(HeaderCodec, bpsk_header_decodes_at_1_db_where_it_must_lead_the_payload) {
    // 4 header symbols (BPSK): at Es/N0 = 1 dB (Eb/N0 = 4 dB) a 96-bit rate-1/2 block fails
    // well under 5% of the time; measured 0/200 with this code. The QPSK fallback of the
    // default numerology needs 3 dB more for the same result (documented trade-off).
    const auto n = with_header_symbols(4);
    header_codec c(n);
    std::mt19937_64 rng(101);
    const float n0 = n0_of_snr_db(1.0);
    int failed = 0;
    for (int t = 0; t < 200; ++t) {
        const auto f = random_fields(rng, n);
        auto re = c.encode(f);
        add_awgn(re, n0, rng);
        const auto r = c.decode(re, std::vector<float>(re.size(), n0));
        failed += !(r.ok() && r.value() == f);
    }
    EXPECT_LT(failed, 10);
}

TEST(HeaderCodec, garbage_is_rejected_and_never_crashes_or_throws) {
    const auto n = numerology::profile("evdo", 1e6);
    header_codec c(n);
    const std::size_t N = c.resource_elements();
    std::mt19937_64 rng(102);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.01f, 3.0f);
    int accepted = 0;
    for (int t = 0; t < 1000; ++t) {
        std::vector<gr_complex> re(N);
        std::vector<float> nv(N);
        for (std::size_t i = 0; i < N; ++i) {
            re[i] = gr_complex(g(rng), g(rng));
            nv[i] = u(rng);
        }
        accepted += c.decode(re, nv).ok();
    }
    EXPECT_EQ(accepted, 0);  // expected false accepts: 1000 x 2^-16 x (field checks) << 1
    const std::vector<gr_complex> zeros(N);
    EXPECT_FALSE(c.decode(zeros, std::vector<float>(N, 1.0f)).ok());
    const std::vector<gr_complex> nans(N, gr_complex(NAN, NAN));
    EXPECT_FALSE(c.decode(nans, std::vector<float>(N, NAN)).ok());
    EXPECT_FALSE(c.decode(std::vector<gr_complex>(N + 1), std::vector<float>(N + 1, 1.0f)).ok());
    EXPECT_FALSE(c.decode(std::vector<gr_complex>(N), std::vector<float>(3, 1.0f)).ok());
    EXPECT_FALSE(c.decode(nullptr, nullptr, N).ok());
}

TEST(HeaderCodec, unpack_names_what_failed) {
    header_codec c(numerology::profile("evdo", 1e6));
    auto b = k_golden_bytes;
    b[3] ^= 0x10;  // flip one field bit
    auto r = c.unpack(b.data());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("CRC"), std::string::npos) << r.error();

    auto with_crc = [](std::array<std::uint8_t, 12> x) {
        const std::uint16_t crc = header_codec::crc16(x.data(), 10);
        x[10] = static_cast<std::uint8_t>(crc >> 8);
        x[11] = static_cast<std::uint8_t>(crc);
        return x;
    };
    b = k_golden_bytes;
    b[9] |= 0x01;  // a reserved bit
    r = c.unpack(with_crc(b).data());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("reserved"), std::string::npos) << r.error();
    b = k_golden_bytes;
    b[2] = 0x9a;  // mcs 9
    r = c.unpack(with_crc(b).data());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("mcs: 9"), std::string::npos) << r.error();
    b = k_golden_bytes;
    b[4] = 0xff;  // tb_bytes far beyond MCS 5's TB size at evdo 1 Msps
    r = c.unpack(with_crc(b).data());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find("tb_bytes"), std::string::npos) << r.error();
}

TEST(HeaderCodec, encode_rejects_out_of_range_fields_naming_them) {
    header_codec c(numerology::profile("evdo", 1e6));
    auto expect_msg = [&](header_fields f, const std::string& what) {
        try {
            c.encode(f);
            ADD_FAILURE() << "accepted, expected " << what;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    header_fields f;
    f.mcs = 8;
    expect_msg(f, "header.mcs: 8");
    f = {};
    f.harq_process = 16;
    expect_msg(f, "header.harq_process: 16");
    f = {};
    f.rv = 4;
    expect_msg(f, "header.rv: 4");
    f = {};
    f.tb_bytes = 1000;  // MCS 0 carries 40-odd bytes
    expect_msg(f, "header.tb_bytes: 1000");
}
