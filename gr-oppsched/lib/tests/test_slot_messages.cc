// The helpers under the blocks: the slot clock (exact tx_time / air times) and the PMT
// dictionaries of the per-slot messages (round trips; bad input gives an Error naming the
// key, never an exception).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "slot_messages.h"
#include "slot_time.h"

using namespace gr::oppsched;

TEST(SlotClock, tx_time_is_exact_after_a_billion_slots) {
    slot_clock c(1667, 1e6);  // evdo at 1 Msps
    c.set_t0(2.5);
    auto t = c.tx_time(0);
    EXPECT_EQ(t.first, 2u);
    EXPECT_EQ(t.second, 0.5);
    // 1e9 slots = 1.667e12 samples = 1667000 s exactly: a double n * T would be off
    t = c.tx_time(1'000'000'000ull);
    EXPECT_EQ(t.first, 2u + 1'667'000u);
    EXPECT_EQ(t.second, 0.5);
    EXPECT_EQ(c.air_time_ns(1'000'000'000ull), (2'500'000'000ll + 1'667'000ll * 1'000'000'000ll));
    EXPECT_EQ(c.air_time_ns(3), 2'500'000'000ll + 3 * 1'667'000ll);
}

TEST(SlotClock, fraction_carries_into_full_seconds) {
    slot_clock c(15000, 5e6);  // 3ms at 5 Msps: 3 ms
    c.set_t0(10.999);
    const auto t = c.tx_time(1);
    EXPECT_EQ(t.first, 11u);
    EXPECT_NEAR(t.second, 0.002, 1e-12);
    EXPECT_GE(t.second, 0.0);
    EXPECT_LT(t.second, 1.0);
    c.set_t0_ns(7'000'000'123);
    EXPECT_EQ(c.air_time_ns(2), 7'000'000'123 + 6'000'000);
}

TEST(SlotClock, bad_values_throw_naming_the_field) {
    EXPECT_THROW(slot_clock(100, 0.0), std::invalid_argument);
    slot_clock c(100, 1e6);
    try {
        c.set_t0(-1.0);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("t0_s"), std::string::npos);
    }
}

TEST(SlotMessages, grant_round_trips_and_empty_tb_is_an_empty_slot) {
    slot_msg::grant g;
    g.slot = (1ull << 40) + 3;
    g.empty = false;
    g.user = 7;
    g.mcs = 5;
    g.harq_pid = 15;
    g.ndi = true;
    g.rv = 3;
    g.tb = {1, 2, 3};
    auto r = slot_msg::grant_from_pmt(slot_msg::to_pmt(g));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->slot, g.slot);
    EXPECT_FALSE(r->empty);
    EXPECT_EQ(r->user, 7);
    EXPECT_EQ(r->mcs, 5);
    EXPECT_EQ(r->harq_pid, 15);
    EXPECT_TRUE(r->ndi);
    EXPECT_EQ(r->rv, 3);
    EXPECT_EQ(r->tb, g.tb);
    g.tb.clear();
    r = slot_msg::grant_from_pmt(slot_msg::to_pmt(g));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->empty);
}

TEST(SlotMessages, bad_grants_give_an_error_naming_the_key) {
    slot_msg::grant g;
    g.empty = false;
    g.user = 1;
    g.tb = {9};
    const pmt::pmt_t ok = slot_msg::to_pmt(g);
    struct bad_case {
        pmt::pmt_t msg;
        const char* key;
    };
    const bad_case cases[] = {
        {pmt::from_long(3), "not a dict"},
        {pmt::dict_delete(ok, pmt::mp("slot")), "slot: missing"},
        {pmt::dict_add(ok, pmt::mp("slot"), pmt::from_long(-1)), "slot"},
        {pmt::dict_add(ok, pmt::mp("user"), pmt::from_long(0xFFFF)), "user"},
        {pmt::dict_add(ok, pmt::mp("rv"), pmt::from_long(4)), "rv"},
        {pmt::dict_add(ok, pmt::mp("harq_pid"), pmt::mp("x")), "harq_pid"},
        {pmt::dict_add(ok, pmt::mp("ndi"), pmt::from_long(2)), "ndi"},
        {pmt::dict_add(ok, pmt::mp("tb"), pmt::init_f32vector(1, std::vector<float>{1.0f})), "tb"},
    };
    for (const auto& c : cases) {
        auto r = slot_msg::grant_from_pmt(c.msg);
        ASSERT_FALSE(r.ok()) << c.key;
        EXPECT_NE(r.error().find(c.key), std::string::npos) << r.error();
    }
}

TEST(SlotMessages, rx_report_round_trips_and_tb_only_when_decoded) {
    slot_msg::rx_report x;
    x.slot = 42;
    x.header_ok = x.addressed = x.crc_ok = true;
    x.user = 3;
    x.mcs = 7;
    x.snr_db = 21.5;
    x.effective_snr_db = 19.0;
    x.cqi = 12;
    x.combined = 2;
    x.tb = {5, 6};
    x.noise_before = 0.0123;
    x.noise_count_before = 4567;
    auto r = slot_msg::rx_from_pmt(slot_msg::to_pmt(x));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->slot, 42u);
    EXPECT_EQ(r->tb, x.tb);
    EXPECT_EQ(r->effective_snr_db, 19.0);
    EXPECT_EQ(r->combined, 2);
    EXPECT_EQ(r->noise_before, 0.0123);
    EXPECT_EQ(r->noise_count_before, 4567);
    auto negative =
        pmt::dict_add(slot_msg::to_pmt(x), pmt::mp("noise_count_before"), pmt::from_long(-1));
    auto n = slot_msg::rx_from_pmt(negative);
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.error().find("noise_count_before"), std::string::npos);
    x.crc_ok = false;  // to_pmt leaves the TB out
    r = slot_msg::rx_from_pmt(slot_msg::to_pmt(x));
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->tb.empty());
    auto bad = pmt::dict_add(slot_msg::to_pmt(x), pmt::mp("tb"),
                             pmt::init_u8vector(1, std::vector<std::uint8_t>{1}));
    EXPECT_FALSE(slot_msg::rx_from_pmt(bad).ok());
    bad = pmt::dict_add(slot_msg::to_pmt(x), pmt::mp("snr_db"),
                        pmt::from_double(std::numeric_limits<double>::quiet_NaN()));
    auto e = slot_msg::rx_from_pmt(bad);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().find("snr_db"), std::string::npos);
}

TEST(SlotMessages, request_round_trips) {
    slot_msg::request q;
    q.slot = std::numeric_limits<std::uint64_t>::max();
    q.air_time_ns = -5;
    auto r = slot_msg::request_from_pmt(slot_msg::to_pmt(q));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->slot, q.slot);
    EXPECT_EQ(r->air_time_ns, -5);
    EXPECT_FALSE(slot_msg::request_from_pmt(pmt::make_dict()).ok());
}

TEST(SlotMessages, integers_out_of_range_are_errors_naming_the_key_and_the_exact_value) {
    constexpr auto u64_max = std::numeric_limits<std::uint64_t>::max();
    constexpr auto long_min = std::numeric_limits<long>::min();
    slot_msg::grant g;
    g.empty = false;
    g.user = 1;
    g.tb = {9};
    const pmt::pmt_t ok = slot_msg::to_pmt(g);
    struct bad_case {
        pmt::pmt_t msg;
        std::string error;
    };
    const bad_case cases[] = {
        // Values no long double of every target holds, and the extremes of both PMT types.
        {pmt::dict_add(ok, pmt::mp("user"), pmt::from_uint64(u64_max)),
         "user: 18446744073709551615 not in [0, 65534]"},
        {pmt::dict_add(ok, pmt::mp("mcs"), pmt::from_long(long_min)),
         "mcs: -9223372036854775808 not in [0, 15]"},
        {pmt::dict_add(ok, pmt::mp("slot"), pmt::from_long(-1)),
         "slot: -1 not in [0, 18446744073709551615]"},
        {pmt::dict_add(ok, pmt::mp("rv"), pmt::from_uint64(4)), "rv: 4 not in [0, 3]"},
    };
    for (const auto& c : cases) {
        auto r = slot_msg::grant_from_pmt(c.msg);
        ASSERT_FALSE(r.ok()) << c.error;
        EXPECT_EQ(r.error(), c.error);
    }
    // air_time_ns is an i64: 2^63 as a uint64 PMT is one too many; the minimum is fine.
    pmt::pmt_t q = slot_msg::to_pmt(slot_msg::request{});
    auto big = slot_msg::request_from_pmt(
        pmt::dict_add(q, pmt::mp("air_time_ns"), pmt::from_uint64(std::uint64_t{1} << 63)));
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.error(),
              "air_time_ns: 9223372036854775808 not in [-9223372036854775808, "
              "9223372036854775807]");
    auto low = slot_msg::request_from_pmt(
        pmt::dict_add(q, pmt::mp("air_time_ns"), pmt::from_long(long_min)));
    ASSERT_TRUE(low.ok()) << low.error();
    EXPECT_EQ(low->air_time_ns, std::numeric_limits<std::int64_t>::min());
    auto top =
        slot_msg::request_from_pmt(pmt::dict_add(q, pmt::mp("slot"), pmt::from_uint64(u64_max)));
    ASSERT_TRUE(top.ok());
    EXPECT_EQ(top->slot, u64_max);
}

// Found by tests/fuzz/fuzz_slot_msg.cc: a uint64 PMT passed pmt::is_number() and then
// pmt::to_double() threw pmt::wrong_type out of rx_from_pmt.
TEST(SlotMessages, real_fields_take_long_uint64_and_double_pmts_and_reject_the_rest_by_key) {
    slot_msg::rx_report x;
    x.slot = 7;
    x.header_ok = true;
    x.cqi = 9;
    const pmt::pmt_t base = slot_msg::to_pmt(x);
    const std::pair<pmt::pmt_t, double> accepted[] = {
        {pmt::from_uint64(12), 12.0}, {pmt::from_long(-3), -3.0}, {pmt::from_double(4.5), 4.5}};
    for (const auto& [value, expected] : accepted) {
        const auto r = slot_msg::rx_from_pmt(pmt::dict_add(base, pmt::mp("snr_db"), value));
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(r->snr_db, expected);
        const auto c = slot_msg::rx_from_pmt(pmt::dict_add(base, pmt::mp("cfo_hz"), value));
        ASSERT_TRUE(c.ok()) << c.error();
        EXPECT_EQ(c->cfo_hz, expected);
    }
    for (const pmt::pmt_t& v : {pmt::from_complex(1.0, 2.0), pmt::mp("x"), pmt::from_bool(true)}) {
        const auto r = slot_msg::rx_from_pmt(pmt::dict_add(base, pmt::mp("snr_db"), v));
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().rfind("snr_db: not a number", 0), 0u) << r.error();
    }
}

TEST(SlotMessages, an_snr_that_is_nan_infinite_or_beyond_f32_is_an_error_naming_the_field) {
    slot_msg::rx_report x;
    x.slot = 7;
    x.header_ok = x.addressed = x.crc_ok = true;
    x.user = 2;
    x.snr_db = 12.5;
    x.effective_snr_db = 11.0;
    x.cqi = 9;
    x.combined = 1;
    x.tb = {1, 2, 3};
    auto ind = slot_msg::to_rx_indication(x, false);
    ASSERT_TRUE(ind.ok()) << ind.error();
    EXPECT_EQ(ind->snr_db, 12.5f);
    EXPECT_EQ(ind->cqi, 9);
    EXPECT_EQ(ind->tb, x.tb);
    EXPECT_EQ(slot_msg::to_rx_indication(x, true)->snr_db, 11.0f);

    struct bad_case {
        double snr;
        bool effective;
        std::string error;
    };
    const bad_case cases[] = {
        {std::numeric_limits<double>::quiet_NaN(), false, "snr_db: nan is not a finite f32"},
        {std::numeric_limits<double>::infinity(), true,
         "effective_snr_db: inf is not a finite f32"},
        {-std::numeric_limits<double>::infinity(), false, "snr_db: -inf is not a finite f32"},
        {1e300, false, "snr_db: 1e+300 is not a finite f32"},
        {-1e39, true, "effective_snr_db: -1e+39 is not a finite f32"},
    };
    for (const auto& c : cases) {
        slot_msg::rx_report y = x;
        (c.effective ? y.effective_snr_db : y.snr_db) = c.snr;
        auto r = slot_msg::to_rx_indication(y, c.effective);
        ASSERT_FALSE(r.ok()) << c.error;
        EXPECT_EQ(r.error(), c.error);
    }
    // The largest float still converts exactly.
    x.snr_db = std::numeric_limits<float>::max();
    EXPECT_EQ(slot_msg::to_rx_indication(x, false)->snr_db, std::numeric_limits<float>::max());
    x.cqi = 256;
    EXPECT_EQ(slot_msg::to_rx_indication(x, false).error(), "cqi: 256 not in [0, 255]");
    x.cqi = 3;
    x.combined = -1;
    EXPECT_EQ(slot_msg::to_rx_indication(x, false).error(), "combined: -1 not in [0, 255]");
}
