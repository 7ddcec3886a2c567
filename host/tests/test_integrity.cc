// Tests of oppsched/integrity.h (the per-run PDU integrity tag) and of its use by the AP
// core (appends it, segments 8 bytes less), the client core (checks it before parsing, NACKs
// a TB that fails), the station and the medium (uplink TBs tagged and checked), and of the
// run binding: a TB recorded in another run with the same testbed key never passes.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "oppsched/ap_core.h"
#include "oppsched/client_core.h"
#include "oppsched/integrity.h"
#include "oppsched/linkadapt.h"
#include "oppsched/medium.h"
#include "oppsched/pdu.h"
#include "oppsched/station.h"

namespace oppsched {
namespace {

integrity::tag_key key_0_to_15() {
    integrity::tag_key k{};
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(i);
    return k;
}

TEST(integrity, tag_of_the_siphash_reference_input_is_the_reference_output) {
    // Aumasson & Bernstein, SipHash, Appendix A: key 00..0f, message 00..0e (15 bytes),
    // SipHash-2-4 = 0xa129ca6149be45e5, written little-endian.
    std::vector<std::uint8_t> msg(15);
    for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i);
    const auto tag = integrity::tag_of(key_0_to_15(), msg.data(), msg.size());
    const std::array<std::uint8_t, 8> expected = {0xe5, 0x45, 0xbe, 0x49, 0x61, 0xca, 0x29, 0xa1};
    EXPECT_EQ(tag, expected);
}

TEST(integrity, a_tagged_tb_verifies_and_any_altered_byte_fails) {
    const auto key = key_0_to_15();
    std::vector<std::uint8_t> tb(100);
    for (std::size_t i = 0; i < tb.size(); ++i) tb[i] = static_cast<std::uint8_t>(3 * i);
    integrity::append_tag(key, tb);
    ASSERT_EQ(tb.size(), 108u);
    EXPECT_TRUE(integrity::verify(key, tb.data(), tb.size()));
    for (std::size_t i = 0; i < tb.size(); ++i) {  // payload and tag bytes alike
        auto bad = tb;
        bad[i] ^= 0x01;
        EXPECT_FALSE(integrity::verify(key, bad.data(), bad.size())) << "byte " << i;
    }
    auto shorter = tb;
    shorter.pop_back();
    EXPECT_FALSE(integrity::verify(key, shorter.data(), shorter.size()));
    EXPECT_FALSE(integrity::verify(key, tb.data(), 7));  // shorter than a tag
}

TEST(integrity, a_tb_tagged_with_another_key_or_a_forged_tag_fails) {
    const auto key = key_0_to_15();
    auto other = key;
    other[15] ^= 0x80;
    std::vector<std::uint8_t> tb(64, 0x42);
    auto forged = tb;
    integrity::append_tag(other, tb);
    EXPECT_FALSE(integrity::verify(key, tb.data(), tb.size()));
    EXPECT_TRUE(integrity::verify(other, tb.data(), tb.size()));
    forged.insert(forged.end(), 8, 0x00);  // an attacker without the key guesses a tag
    EXPECT_FALSE(integrity::verify(key, forged.data(), forged.size()));
}

TEST(integrity, key_text_round_trips_and_bad_text_is_refused_without_echoing_it) {
    const auto k = integrity::random_key();
    EXPECT_EQ(integrity::key_from_hex(" " + integrity::key_to_hex(k) + "\n"), k);
    EXPECT_EQ(integrity::key_to_hex(key_0_to_15()), "000102030405060708090a0b0c0d0e0f");
    EXPECT_NE(integrity::random_key(), integrity::random_key());
    for (const std::string bad :
         {"00", "000102030405060708090a0b0c0d0e0f00", "zz0102030405060708090a0b0c0d0e0f"}) {
        try {
            integrity::key_from_hex(bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const std::invalid_argument& e) {
            EXPECT_EQ(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

// ---- through the cores ----

ap::ap_core_params one_user(std::optional<integrity::tag_key> key) {
    ap::ap_core_params p;
    p.users = {{"ue0", {"10.0.0.1"}, {}, {}}};
    p.table = linkadapt::mcs_table("test", {{"low", 0.0, 100e3, 0, 0.0}});  // 125 B at 10 ms
    p.slot_s = 0.01;
    p.lead_slots = 2;
    p.aqm.limits = {0, 100};
    p.integrity_key = key;
    return p;
}

std::vector<std::uint8_t> ipv4_to_1(std::size_t size) {
    std::vector<std::uint8_t> p(size, 0xab);
    p[0] = 0x45;
    p[2] = static_cast<std::uint8_t>(size >> 8);
    p[3] = static_cast<std::uint8_t>(size);
    p[8] = 64;
    p[9] = 253;
    p[12] = 10, p[13] = 9, p[14] = 9, p[15] = 9;
    p[16] = 10, p[17] = 0, p[18] = 0, p[19] = 1;
    return p;
}

wire::rx_indication indication(const wire::slot_grant& g, std::vector<std::uint8_t> tb) {
    wire::rx_indication ind;
    ind.slot = g.slot;
    ind.user = g.user;
    ind.mcs = g.mcs;
    ind.harq_pid = g.harq_pid;
    ind.header_ok = ind.addressed = ind.crc_ok = true;
    ind.snr_db = 10.0f;
    ind.cqi = 1;
    ind.tb = std::move(tb);
    return ind;
}

TEST(integrity, with_a_key_the_ap_tags_each_tb_and_carries_8_bytes_less_of_data) {
    const auto key = key_0_to_15();
    ap::ap_core plain(one_user(std::nullopt));
    ap::ap_core tagged(one_user(key));
    for (auto* ap : {&plain, &tagged})
        for (int i = 0; i < 10; ++i) ASSERT_TRUE(ap->on_downlink_packet(0, ipv4_to_1(300)));
    const auto gp = plain.on_slot_request(0, 0, 20 * kNsPerMs);
    const auto gt = tagged.on_slot_request(0, 0, 20 * kNsPerMs);
    ASSERT_FALSE(gp.empty);
    ASSERT_FALSE(gt.empty);
    EXPECT_EQ(gt.tb.size(), 125u);  // the TB keeps the MCS's size
    EXPECT_EQ(gt.tb.size(), gp.tb.size());
    EXPECT_TRUE(integrity::verify(key, gt.tb.data(), gt.tb.size()));
    EXPECT_FALSE(integrity::verify(key, gp.tb.data(), gp.tb.size()));
    const auto pdu_p = pdu::parse(gp.tb);
    const auto pdu_t = pdu::parse(std::vector<std::uint8_t>(gt.tb.begin(), gt.tb.end() - 8));
    ASSERT_TRUE(pdu_p.ok());
    ASSERT_TRUE(pdu_t.ok());
    std::size_t data_p = 0, data_t = 0;
    for (const auto& s : pdu_p.value().segments) data_p += s.data.size();
    for (const auto& s : pdu_t.value().segments) data_t += s.data.size();
    EXPECT_EQ(data_p - data_t, integrity::kTagBytes);
}

TEST(integrity, the_client_delivers_a_tagged_tb_and_drops_an_altered_one_unparsed) {
    const auto key = key_0_to_15();
    ap::ap_core ap(one_user(key));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(ap.on_downlink_packet(0, ipv4_to_1(40)));
    client::client_core_params cp;
    cp.user = 0;
    cp.integrity_key = key;
    client::client_core client(cp);
    const auto g = ap.on_slot_request(0, 0, 20 * kNsPerMs);
    ASSERT_FALSE(g.empty);
    auto altered = g.tb;
    altered[10] ^= 0x20;  // the PDU's own CRC would catch it too: the tag comes first
    auto out = client.on_rx_indication(0, indication(g, altered));
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_EQ(client.stats().rx_integrity_failed, 1u);
    EXPECT_EQ(client.stats().pdu_errors, 0u);  // never reached the parser
    EXPECT_EQ(client.reassembly_stats().malformed, 0u);
    ASSERT_EQ(out.uplink.size(), 2u);  // HARQ feedback and CQI still go up
    // CRC ok but not the AP's TB: a NACK (the AP's own TB of that slot, if any, goes again)
    ASSERT_TRUE(std::holds_alternative<wire::harq_feedback>(out.uplink.at(0)));
    EXPECT_FALSE(std::get<wire::harq_feedback>(out.uplink.at(0)).ack);
    EXPECT_EQ(client.stats().harq_nacks, 1u);
    EXPECT_EQ(client.stats().harq_acks, 0u);
    out = client.on_rx_indication(kNsPerMs, indication(g, g.tb));
    // 125 - 8 bytes: header 20 + two segments of 8 + 40 bytes (a third would need 9 more)
    ASSERT_EQ(out.delivered.size(), 2u);
    EXPECT_EQ(out.delivered.at(1), ipv4_to_1(40));
    EXPECT_EQ(client.stats().rx_integrity_failed, 1u);
    // A client without the key reads the tag as the PDU's CRC: a PDU error, nothing delivered.
    client::client_core_params no_key = cp;
    no_key.integrity_key.reset();
    client::client_core plain(no_key);
    EXPECT_TRUE(plain.on_rx_indication(0, indication(g, g.tb)).delivered.empty());
    EXPECT_EQ(plain.stats().pdu_errors, 1u);
}

// ---- bound to the run ----

integrity::run_id run_id_of(std::uint8_t fill) {
    integrity::run_id r{};
    r.fill(fill);
    return r;
}

TEST(integrity, run_keys_are_deterministic_and_differ_per_run_and_per_direction) {
    const auto tk = key_0_to_15();
    using integrity::link_direction;
    const auto d1 = integrity::run_key(tk, run_id_of(1), link_direction::downlink);
    EXPECT_EQ(d1, integrity::run_key(tk, run_id_of(1), link_direction::downlink));
    EXPECT_NE(d1, integrity::run_key(tk, run_id_of(2), link_direction::downlink));
    EXPECT_NE(d1, integrity::run_key(tk, run_id_of(1), link_direction::uplink));
    EXPECT_NE(d1, tk);
    auto other_testbed = tk;
    other_testbed[0] ^= 1;
    EXPECT_NE(d1, integrity::run_key(other_testbed, run_id_of(1), link_direction::downlink));
    // Pinned (Python's hashlib.blake2b(msg, key=bytes(range(16)), digest_size=16), RFC 7693):
    // keyed 00..0f over "oppsched tb key v1" || direction || 01 x 16. The Python tools and
    // the Wireshark dissector may derive the same keys.
    EXPECT_EQ(integrity::key_to_hex(d1), "a98c111ab4ef92a988713e2f75405997");
    EXPECT_EQ(integrity::key_to_hex(integrity::run_key(tk, run_id_of(1), link_direction::uplink)),
              "221ff4286da08872c68e6a26a80f2914");
    const auto id = integrity::run_id_from_hex(" 00112233445566778899aabbccddeeff\n");
    EXPECT_EQ(integrity::run_id_to_hex(id), "00112233445566778899aabbccddeeff");
    EXPECT_THROW(integrity::run_id_from_hex("0011"), std::invalid_argument);
    EXPECT_THROW(integrity::run_id_from_hex("zz112233445566778899aabbccddeeff"),
                 std::invalid_argument);
}

// Run `fill` of one AP with session `session` and the run's downlink key (or the testbed key
// itself, as before the run binding, with `bound` false).
ap::ap_core_params run_of(std::uint8_t fill, std::uint16_t session, bool bound = true) {
    auto p = one_user(bound ? integrity::run_key(key_0_to_15(), run_id_of(fill),
                                                 integrity::link_direction::downlink)
                            : key_0_to_15());
    p.session = session;
    return p;
}

// The client of the same run: its downlink key as the apd's.
client::client_core_params client_of(const ap::ap_core_params& ap) {
    client::client_core_params cp;
    cp.user = 0;
    cp.integrity_key = ap.integrity_key;
    return cp;
}

// A TB of `ap` in slot `slot`, packets of 40 bytes queued first.
wire::slot_grant tb_of(ap::ap_core& ap, std::uint64_t slot, int packets) {
    for (int i = 0; i < packets; ++i) EXPECT_TRUE(ap.on_downlink_packet(0, ipv4_to_1(40)));
    auto g = ap.on_slot_request(slot, static_cast<time_ns>(slot) * 10 * kNsPerMs,
                                static_cast<time_ns>(slot + 2) * 10 * kNsPerMs);
    EXPECT_FALSE(g.empty);
    return g;
}

const wire::harq_feedback& feedback_of(const client::rx_output& o) {
    return std::get<wire::harq_feedback>(o.uplink.at(0));
}

TEST(integrity,
     a_tb_replayed_from_another_run_with_the_same_testbed_key_is_nacked_and_keeps_the_session) {
    // Run 1 (session 0x1111): a TB recorded over the air, carrying its session trailer.
    ap::ap_core run1(run_of(1, 0x1111));
    const auto recorded = tb_of(run1, 0, 2);
    // Run 2 (session 0x2222), same testbed key: the client holds run 2's session and data.
    ap::ap_core run2(run_of(2, 0x2222));
    client::client_core client(client_of(run2.params()));
    const auto first = tb_of(run2, 0, 1);
    auto out = client.on_rx_indication(0, indication(first, first.tb));
    ASSERT_EQ(out.delivered.size(), 1u);
    ASSERT_EQ(client.reassembly_stats().session_restarts, 0u);
    // The replay, in a slot of run 2's, addressed as the PHY heard it.
    auto replay = indication(first, recorded.tb);
    replay.slot = 1;
    out = client.on_rx_indication(kNsPerMs, replay);
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_FALSE(feedback_of(out).ack);
    EXPECT_EQ(client.stats().rx_integrity_failed, 1u);
    EXPECT_EQ(client.reassembly_stats().session_restarts, 0u);
    EXPECT_EQ(client.reassembly_stats().dropped_restart, 0u);
    // Run 2 goes on where it was.
    const auto next = tb_of(run2, 1, 1);
    out = client.on_rx_indication(2 * kNsPerMs, indication(next, next.tb));
    EXPECT_EQ(out.delivered.size(), 1u);
    EXPECT_TRUE(feedback_of(out).ack);
    EXPECT_EQ(client.reassembly_stats().session_restarts, 0u);
}

TEST(integrity, without_the_run_binding_the_same_replay_would_restart_the_clients_session) {
    // What the run id prevents: with the testbed key used as it is (the tag before the run
    // binding), run 1's TB passes in run 2 and its session trailer restarts the session.
    ap::ap_core run1(run_of(1, 0x1111, false));
    const auto recorded = tb_of(run1, 0, 2);
    ap::ap_core run2(run_of(2, 0x2222, false));
    client::client_core client(client_of(run2.params()));
    const auto first = tb_of(run2, 0, 1);
    client.on_rx_indication(0, indication(first, first.tb));
    auto replay = indication(first, recorded.tb);
    replay.slot = 1;
    const auto out = client.on_rx_indication(kNsPerMs, replay);
    EXPECT_EQ(client.stats().rx_integrity_failed, 0u);
    EXPECT_TRUE(feedback_of(out).ack);
    EXPECT_EQ(client.reassembly_stats().session_restarts, 1u);
}

TEST(integrity, a_tb_replayed_within_its_run_delivers_nothing_twice_and_keeps_the_session) {
    ap::ap_core ap(run_of(3, 0x3333));
    client::client_core client(client_of(ap.params()));
    // (one 40-byte packet a TB: 125 - 8 tag - 20 header - 2 session trailer leave 95 bytes)
    const auto a = tb_of(ap, 0, 1);
    const auto b = tb_of(ap, 1, 1);
    EXPECT_EQ(client.on_rx_indication(0, indication(a, a.tb)).delivered.size(), 1u);
    EXPECT_EQ(client.on_rx_indication(kNsPerMs, indication(b, b.tb)).delivered.size(), 1u);
    // The replay of a (its tag is this run's): its segments are duplicates the reassembler
    // drops, its session trailer the session the client holds.
    auto replay = indication(a, a.tb);
    replay.slot = 5;
    const auto out = client.on_rx_indication(2 * kNsPerMs, replay);
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_EQ(client.stats().rx_integrity_failed, 0u);
    EXPECT_EQ(client.reassembly_stats().session_restarts, 0u);
    EXPECT_EQ(client.stats().delivered_packets, 2u);
}

// ---- uplink: the station's TBs and the medium's check ----

constexpr double kUpSlotS = 1.667e-3;
constexpr time_ns kUpSlotNs = 1'667'000;

integrity::tag_key uplink_key(std::uint8_t run) {
    return integrity::run_key(key_0_to_15(), run_id_of(run), integrity::link_direction::uplink);
}

ap::medium tagged_medium(ap::uplink_decode decode, ap::station_queue queue,
                         std::optional<integrity::tag_key> key) {
    ap::medium_params p;
    p.mode = ap::medium_mode::node_fair;
    p.decode = decode;
    p.queue = queue;
    p.uplink_mean_snr_db = 60.0;
    p.uplink_doppler_hz = 0.0;
    p.olla_enabled = false;
    p.max_transmissions = 3;
    p.seed = 7;
    p.integrity_key = key;
    const auto t = linkadapt::mcs_table::evdo();
    std::vector<std::uint32_t> tbs;  // as ap_core: the smallest usable TB counts the tag
    for (std::size_t m = 0; m < t.size(); ++m) {
        const auto b = t.bytes_per_slot(static_cast<int>(m), kUpSlotS);
        tbs.push_back(b >= pdu::min_usable_tb_bytes(pdu::pdu_format::standard) + 8 ? b : 0);
    }
    return ap::medium(p, {"s0"}, t, tbs, pdu::pdu_format::standard, kUpSlotS);
}

// The AP receiver's report of slot `g.slot`: heard, CRC ok, carrying `tb`.
wire::rx_indication uplink_report(const wire::slot_grant& g, std::vector<std::uint8_t> tb) {
    wire::rx_indication r;
    r.slot = g.slot;
    r.header_ok = r.addressed = r.crc_ok = true;
    r.snr_db = 30.0f;
    r.user = g.user;
    r.mcs = g.mcs;
    r.harq_pid = g.harq_pid;
    r.ndi = g.ndi;
    r.rv = g.rv;
    r.tb = std::move(tb);
    return r;
}

TEST(integrity, the_medium_tags_uplink_tbs_and_nacks_one_forged_or_from_another_run) {
    auto m = tagged_medium(ap::uplink_decode::phy, ap::station_queue::ap, uplink_key(2));
    wire::rx_indication heard;  // the sounding: the AP has measured the uplink
    heard.slot = 0;
    heard.header_ok = true;
    heard.snr_db = 30.0f;
    heard.user = wire::kUserNobody;
    ASSERT_TRUE(m.on_uplink_rx(0, 0, heard));
    ASSERT_TRUE(m.on_uplink_packet(0, 0, ipv4_to_1(60)));
    ASSERT_EQ(m.on_slot(1, kUpSlotNs, {false}, {0.0}), ap::slot_direction::up);
    const auto g = *m.take_uplink_grant();
    // The TB on the air: the MAC PDU and its tag under run 2's uplink key, not the downlink's.
    EXPECT_TRUE(integrity::verify(uplink_key(2), g.tb.data(), g.tb.size()));
    EXPECT_FALSE(integrity::verify(
        integrity::run_key(key_0_to_15(), run_id_of(2), integrity::link_direction::downlink),
        g.tb.data(), g.tb.size()));
    ASSERT_TRUE(pdu::parse(std::vector<std::uint8_t>(g.tb.begin(), g.tb.end() - 8)).ok());
    // In its slot the AP's receiver decodes another TB: the same PDU tagged in run 1.
    std::vector<std::uint8_t> other_run(g.tb.begin(), g.tb.end() - 8);
    integrity::append_tag(uplink_key(1), other_run);
    ASSERT_TRUE(m.on_uplink_rx(2 * kUpSlotNs, 0, uplink_report(g, other_run)));
    EXPECT_TRUE(m.take_received(100 * kUpSlotNs).empty());
    EXPECT_EQ(m.station_stats(0).integrity_failed, 1u);
    EXPECT_EQ(m.station_stats(0).tbs_ok, 0u);
    auto rows = m.take_rows();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_STREQ(rows[0].outcome, "integrity");
    // A NACK: the station's own TB goes again, unchanged, and gets through.
    ASSERT_EQ(m.on_slot(3, 3 * kUpSlotNs, {false}, {0.0}), ap::slot_direction::up);
    const auto again = *m.take_uplink_grant();
    EXPECT_EQ(again.tb, g.tb);
    ASSERT_TRUE(m.on_uplink_rx(4 * kUpSlotNs, 0, uplink_report(again, again.tb)));
    const auto got = m.take_received(100 * kUpSlotNs);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], ipv4_to_1(60));
    bool counted = false;
    for (const auto& [k, v] : m.counters())
        if (k == "up.s0.integrity_failed") counted = v == 1;
    EXPECT_TRUE(counted);
}

TEST(integrity, a_stations_tbs_carry_its_runs_tag_and_the_medium_refuses_another_runs) {
    for (const std::uint8_t station_run : {2, 1}) {  // the AP's run, then another
        auto m = tagged_medium(ap::uplink_decode::model, ap::station_queue::client, uplink_key(2));
        client::station_params sp;
        sp.integrity_key = uplink_key(station_run);
        client::station st(sp);
        ASSERT_TRUE(st.on_packet(0, ipv4_to_1(60)));
        const auto bs = st.take_status(0);
        ASSERT_TRUE(bs);
        m.on_buffer_status(0, 0, *bs);
        const time_ns air = 4 * kUpSlotNs;
        ASSERT_EQ(m.on_slot(0, air, {false}, {0.0}), ap::slot_direction::up);
        const auto g = *m.take_station_grant();
        const auto tb = st.on_grant(0, g);
        ASSERT_TRUE(tb);
        EXPECT_EQ(tb->tb.size(), g.tb_bytes);  // the tag inside the granted size
        EXPECT_TRUE(integrity::verify(uplink_key(station_run), tb->tb.data(), tb->tb.size()));
        ASSERT_TRUE(m.on_uplink_tb(0, 0, *tb));
        const auto got = m.take_received(air + 10 * kUpSlotNs);
        if (station_run == 2) {
            ASSERT_EQ(got.size(), 1u);
            EXPECT_EQ(got[0], ipv4_to_1(60));
            EXPECT_EQ(m.station_stats(0).integrity_failed, 0u);
        } else {
            EXPECT_TRUE(got.empty());
            EXPECT_EQ(m.station_stats(0).integrity_failed, 1u);
        }
    }
}

}  // namespace
}  // namespace oppsched
