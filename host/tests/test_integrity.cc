// Tests of oppsched/integrity.h (the per-run PDU integrity tag) and of its use by the AP
// core (appends it, segments 8 bytes less) and the client core (checks it before parsing).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "oppsched/ap_core.h"
#include "oppsched/client_core.h"
#include "oppsched/integrity.h"
#include "oppsched/pdu.h"

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
    ASSERT_EQ(out.uplink.size(), 2u);  // HARQ ACK (CRC ok) and CQI still go up
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

}  // namespace
}  // namespace oppsched
