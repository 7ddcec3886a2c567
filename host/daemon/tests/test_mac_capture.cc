// The MAC capture (mac_capture.h): the pcap writer's file format, size limit and flushing,
// and the pseudo-header of PDUs and PHY-MAC messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fsize_limit.h"
#include "oppsched/daemon/mac_capture.h"
#include "oppsched/daemon/pcap_writer.h"
#include "oppsched/wire.h"

namespace oppsched::daemon {
namespace {

std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "/oppsched_mac_capture_" + std::to_string(::getpid()) + "_" +
           name;
}

std::vector<std::uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint32_t le32(const std::vector<std::uint8_t>& b, std::size_t at) {
    std::uint32_t v;
    std::memcpy(&v, b.data() + at, 4);  // written in host order, as pcap allows
    return v;
}

struct record {
    std::uint32_t sec = 0, nsec = 0;
    std::vector<std::uint8_t> data;
};

// A minimal reader of what pcap_writer writes (host-order nanosecond pcap).
std::vector<record> read_records(const std::vector<std::uint8_t>& f) {
    std::vector<record> out;
    std::size_t at = pcap_writer::kFileHeaderBytes;
    while (at + 16 <= f.size()) {
        record r;
        r.sec = le32(f, at);
        r.nsec = le32(f, at + 4);
        const std::uint32_t incl = le32(f, at + 8);
        EXPECT_EQ(le32(f, at + 12), incl);
        at += 16;
        EXPECT_LE(at + incl, f.size());
        r.data.assign(f.begin() + static_cast<long>(at), f.begin() + static_cast<long>(at + incl));
        at += incl;
        out.push_back(std::move(r));
    }
    EXPECT_EQ(at, f.size());
    return out;
}

TEST(
    PcapWriter,
    when_the_disk_is_full_then_the_buffered_records_are_counted_lost_and_the_file_keeps_whole_records) {
    const auto path = temp_path("full.pcap");
    std::filesystem::remove(path);
    pcap_writer::options o;
    o.flush_interval = 1'000'000 * kNsPerSec;  // flushed by hand only
    pcap_writer w(path, o);
    const std::uint8_t a[] = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_TRUE(w.write(1, a, 8, nullptr, 0));
    ASSERT_TRUE(w.flush());  // 24 + 16 + 8 = 48 bytes
    {
        testing::fsize_limit full(60);  // part of one more record fits, not two
        ASSERT_TRUE(w.write(2, a, 8, nullptr, 0));
        ASSERT_TRUE(w.write(3, a, 8, nullptr, 0));
        EXPECT_FALSE(w.flush());
    }
    EXPECT_EQ(w.errors(), 1u);
    EXPECT_EQ(w.lost(), 2u);
    EXPECT_EQ(slurp(path + ".partial").size(), 48u);  // cut at the last whole record
    ASSERT_TRUE(w.write(4, a, 8, nullptr, 0));
    EXPECT_TRUE(w.close());
    const auto recs = read_records(slurp(path));
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].nsec, 1u);
    EXPECT_EQ(recs[1].nsec, 4u);  // the records after the loss follow a well-formed file
    std::filesystem::remove(path);
}

TEST(PcapWriter, WritesANanosecondPcapWithTheLinktypeAndEachRecordWhole) {
    const auto path = temp_path("basic.pcap");
    {
        pcap_writer::options o;
        o.linktype = 147;
        pcap_writer w(path, o);
        const std::uint8_t a[] = {1, 2, 3}, b[] = {4, 5};
        EXPECT_TRUE(w.write(1'700'000'000LL * kNsPerSec + 123'456'789, a, 3, b, 2));
        EXPECT_TRUE(w.write(5, a, 3, nullptr, 0));
        EXPECT_EQ(w.records(), 2u);
        EXPECT_EQ(w.bytes(), 24u + 16 + 5 + 16 + 3);
    }
    const auto f = slurp(path);
    ASSERT_GE(f.size(), 24u);
    EXPECT_EQ(le32(f, 0), 0xA1B23C4Du);
    EXPECT_EQ(le32(f, 20), 147u);
    const auto recs = read_records(f);
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].sec, 1'700'000'000u);
    EXPECT_EQ(recs[0].nsec, 123'456'789u);
    EXPECT_EQ(recs[0].data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(recs[1].sec, 0u);
    EXPECT_EQ(recs[1].nsec, 5u);
    std::filesystem::remove(path);
}

TEST(PcapWriter, StopsAtTheSizeLimitAndCountsWhatItLeftOut) {
    const auto path = temp_path("limit.pcap");
    std::vector<std::uint8_t> payload(100, 0xAB);
    {
        pcap_writer::options o;
        o.max_bytes = 24 + 3 * (16 + 100) + 50;  // room for three records, not four
        pcap_writer w(path, o);
        for (int i = 0; i < 10; ++i) w.write(i, payload.data(), payload.size(), nullptr, 0);
        EXPECT_TRUE(w.truncated());
        EXPECT_EQ(w.records(), 3u);
        EXPECT_EQ(w.dropped(), 7u);
        // a small record that would still fit is not written either: the capture ends whole
        const std::uint8_t one = 1;
        EXPECT_FALSE(w.write(11, &one, 1, nullptr, 0));
    }
    const auto f = slurp(path);
    EXPECT_EQ(f.size(), 24u + 3 * 116);
    EXPECT_EQ(read_records(f).size(), 3u);
    std::filesystem::remove(path);
}

TEST(PcapWriter, FlushMakesRecordsReadableWhileTheFileIsOpen) {
    const auto path = temp_path("flush.pcap");
    pcap_writer::options o;
    o.flush_interval = 3600 * kNsPerSec;  // only the explicit flush
    {
        pcap_writer w(path, o);
        const std::uint8_t a[] = {9, 9};
        w.write(1, a, 2, nullptr, 0);
        // under the partial name until the writer is destroyed (then renamed)
        EXPECT_EQ(slurp(path + ".partial").size(), 24u);  // buffered
        EXPECT_TRUE(w.flush());
        EXPECT_EQ(slurp(path + ".partial").size(), 24u + 16 + 2);
        EXPECT_FALSE(std::filesystem::exists(path));
    }
    EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
    EXPECT_EQ(slurp(path).size(), 24u + 16 + 2);
    std::filesystem::remove(path);
}

TEST(PcapWriter, RefusesALimitBelowTheFileHeaderAndAnUncreatableFile) {
    pcap_writer::options o;
    o.max_bytes = 10;
    EXPECT_THROW(pcap_writer(temp_path("x.pcap"), o), std::invalid_argument);
    EXPECT_THROW(pcap_writer("/nonexistent-dir/x.pcap", pcap_writer::options{}),
                 std::runtime_error);
}

TEST(MacPcap, PseudoHeaderIsBigEndianWithEveryFieldAtItsOffset) {
    mac_pcap::record_header h;
    h.k = mac_pcap::kind::pdu;
    h.dir = mac_pcap::direction::received;
    h.p = mac_pcap::port::rx;
    h.flags = mac_pcap::kFlagSlot | mac_pcap::kFlagCrc;
    h.user = 0x0102;
    h.slot = 0x0A0B0C0D0E0F1011ull;
    h.harq_pid = 7;
    h.ndi = 1;
    h.rv = 2;
    h.mcs = 15;
    h.tb_len = 0x1234;
    const auto b = mac_pcap::encode(h);
    const std::array<std::uint8_t, 24> want = {1,    24,   1,    1,    4,    0x09, 0x01, 0x02,
                                               0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11,
                                               7,    1,    2,    15,   0x12, 0x34, 0,    0};
    EXPECT_EQ(b, want);
}

TEST(MacPcap, AMessageRecordCarriesTheFieldsItsMessageHas) {
    wire::slot_grant g;
    g.slot = 77;
    g.empty = false;
    g.user = 2;
    g.mcs = 9;
    g.harq_pid = 3;
    g.ndi = 1;
    g.rv = 2;
    g.tb.assign(40, 0);
    const auto f = wire::encode(g, 5);
    auto h = mac_pcap::message_header(mac_pcap::direction::sent, mac_pcap::port::phy_grants,
                                      f.data(), f.size());
    EXPECT_EQ(h.k, mac_pcap::kind::message);
    EXPECT_EQ(h.flags, mac_pcap::kFlagSlot | mac_pcap::kFlagUser | mac_pcap::kFlagHarq);
    EXPECT_EQ(h.slot, 77u);
    EXPECT_EQ(h.user, 2);
    EXPECT_EQ(h.mcs, 9);
    EXPECT_EQ(h.harq_pid, 3);
    EXPECT_EQ(h.ndi, 1);
    EXPECT_EQ(h.rv, 2);
    EXPECT_EQ(h.tb_len, 40);

    const auto req = wire::encode(wire::slot_request{12, 34}, 0);
    h = mac_pcap::message_header(mac_pcap::direction::received, mac_pcap::port::phy_requests,
                                 req.data(), req.size());
    EXPECT_EQ(h.flags, mac_pcap::kFlagSlot);  // a request names no user
    EXPECT_EQ(h.slot, 12u);

    wire::rx_indication ind;
    ind.slot = 5;
    ind.user = 1;
    ind.header_ok = ind.addressed = true;
    ind.crc_ok = false;
    const auto fi = wire::encode(ind, 0);
    h = mac_pcap::message_header(mac_pcap::direction::received, mac_pcap::port::rx, fi.data(),
                                 fi.size());
    EXPECT_EQ(h.flags, mac_pcap::kFlagSlot | mac_pcap::kFlagUser | mac_pcap::kFlagHarq |
                           mac_pcap::kFlagCrc);  // CRC known, failed

    auto bad = f;
    bad[20] ^= 0xFF;  // the frame's CRC no longer checks
    h = mac_pcap::message_header(mac_pcap::direction::sent, mac_pcap::port::phy_grants, bad.data(),
                                 bad.size());
    EXPECT_EQ(h.flags, mac_pcap::kFlagBadMessage);
    EXPECT_EQ(h.slot, 0u);
}

TEST(MacCapture, WritesTheTbOfAGrantAndTheFrameOfEachMessage) {
    const auto path = temp_path("cap.pcap");
    wire::slot_grant g;
    g.slot = 3;
    g.empty = false;
    g.user = 1;
    g.tb = {0x01, 0x02, 0x03};
    const auto f = wire::encode(g, 0);
    wire::slot_grant empty;
    empty.slot = 4;
    {
        mac_capture c(path, 1 << 20);
        c.pdu_sent(g);
        c.pdu_sent(empty);  // no TB: no PDU record
        c.message(mac_pcap::direction::sent, mac_pcap::port::phy_grants, f);
        EXPECT_EQ(c.writer().records(), 2u);
    }
    const auto recs = read_records(slurp(path));
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].data.size(), 24u + 3);
    EXPECT_EQ(recs[0].data[2], 1);  // kind pdu
    EXPECT_EQ(std::vector<std::uint8_t>(recs[0].data.begin() + 24, recs[0].data.end()), g.tb);
    EXPECT_EQ(recs[1].data[2], 2);  // kind message
    EXPECT_EQ(std::vector<std::uint8_t>(recs[1].data.begin() + 24, recs[1].data.end()), f);
    EXPECT_GT(recs[0].sec, 1'600'000'000u);  // wall-clock time stamps
    std::filesystem::remove(path);
}

TEST(MacCapture, ADaemonThatTagsItsTbsSetsTheTagFlagOnEveryRecord) {
    const auto path = temp_path("tag.pcap");
    wire::slot_grant g;
    g.slot = 5;
    g.empty = false;
    g.user = 0;
    g.tb = std::vector<std::uint8_t>(20, 0x01);
    const auto f = wire::encode(g, 0);
    for (const bool tagged : {false, true}) {
        {
            mac_capture c(path, 1 << 20, tagged);
            c.pdu_sent(g);
            c.message(mac_pcap::direction::sent, mac_pcap::port::phy_grants, f);
        }
        const auto recs = read_records(slurp(path));
        ASSERT_EQ(recs.size(), 2u);
        for (const auto& r : recs) {
            EXPECT_EQ((r.data[5] & mac_pcap::kFlagTag) != 0, tagged);
            EXPECT_EQ(r.data[5] & ~mac_pcap::kFlagTag,
                      mac_pcap::kFlagSlot | mac_pcap::kFlagUser | mac_pcap::kFlagHarq);
        }
        std::filesystem::remove(path);
    }
}

}  // namespace
}  // namespace oppsched::daemon
