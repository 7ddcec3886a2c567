// Fuzz target: oppsched::wrc::decode (host wrc_packet.h), the UDP datagrams oppsched-wrc
// reads from the network, and what the daemon does with an accepted one: a data packet goes
// to the flow's rate_controller (the receiver), feedback to the pacer (the sender).
// The input is a sequence of datagrams, each: a length byte (its low 6 bits + 0..63 bytes;
// bit 6 set: the 4 common bytes are forced to a valid data/feedback start, by bit 7, so the
// fuzzer reaches the field checks), a time step byte (x 1 ms), then the bytes.
// Invariants: decode never throws, never reads past the datagram (each is an exact-size heap
// copy); an error names a field ("wrc.<field>: ..."); an accepted datagram is at least 32
// bytes and re-encodes to its first 32 bytes with the reserved fields zeroed; the receiver's
// rate stays finite and within [min_rate_pps, max_rate_pps]; the pacer's rate finite and > 0,
// its rate_seq only ever moving forward.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"
#include "oppsched/wrc.h"
#include "oppsched/wrc_packet.h"

using namespace oppsched;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::input_reader in(data, size);
    wrc::rate_controller_params rp;
    rp.max_rate_pps = 5000.0;
    wrc::rate_controller rc(rp);
    wrc::pacer_params pp;
    wrc::pacer pacer(pp);
    pacer.start(0);
    time_ns now = 0;
    std::uint32_t pacer_seq = pacer.rate_seq();
    for (int n = 0; n < 256 && !in.empty(); ++n) {
        const std::uint8_t len_byte = in.u8();
        now += static_cast<time_ns>(in.u8()) * 1'000'000;
        const std::size_t len = len_byte & 0x3fu;
        auto bytes = in.bytes(len);
        if (len_byte & 0x40u && bytes.size() >= 4) {
            store_be16(bytes.data(), wrc::kMagic);
            bytes[2] = wrc::kVersion;
            bytes[3] = (len_byte & 0x80u) ? 2 : 1;
        }
        // An exact-size heap copy, so an overread leaves the allocation (ASan reports it).
        const std::unique_ptr<std::uint8_t[]> dgram(new std::uint8_t[bytes.size() + 1]);
        if (!bytes.empty()) std::memcpy(dgram.get(), bytes.data(), bytes.size());
        const auto m = wrc::decode(bytes.empty() ? nullptr : dgram.get(), bytes.size());
        if (!m.ok()) {
            FUZZ_CHECK(m.error().rfind("wrc.", 0) == 0 && m.error().find(": ") != std::string::npos,
                       m.error().c_str());
            continue;
        }
        FUZZ_CHECK(bytes.size() >= wrc::kHeaderBytes, "only a whole header decodes");
        std::uint8_t again[wrc::kHeaderBytes];
        std::uint8_t expect[wrc::kHeaderBytes];
        std::memcpy(expect, bytes.data(), wrc::kHeaderBytes);
        if (const auto* d = std::get_if<wrc::data_header>(&m.value())) {
            wrc::encode(*d, again, sizeof again);
            std::memset(expect + 30, 0, 2);  // reserved
            FUZZ_CHECK(d->snd_sep_us > 0 && d->weight > 0, "checked fields");
            const auto records = rc.on_packet(now, {d->seq, d->snd_sep_us * 1e-6, d->rate_seq});
            for (const auto& r : records)
                FUZZ_CHECK(std::isfinite(r.rate_pps) && r.rate_pps >= rp.min_rate_pps &&
                               r.rate_pps <= rp.max_rate_pps,
                           "a record's rate stays within the floor and ceiling");
            FUZZ_CHECK(std::isfinite(rc.rate_pps()) && rc.rate_pps() >= rp.min_rate_pps &&
                           rc.rate_pps() <= rp.max_rate_pps,
                       "the receiver's rate stays within the floor and ceiling");
        } else {
            const auto& f = std::get<wrc::feedback_header>(m.value());
            wrc::encode(f, again, sizeof again);
            std::memset(expect + 24, 0, 8);  // reserved
            FUZZ_CHECK(f.rate_mpps > 0, "checked field");
            const bool adopted = pacer.on_feedback(f.rate_mpps / 1000.0, f.rate_seq);
            FUZZ_CHECK(std::isfinite(pacer.rate_pps()) && pacer.rate_pps() > 0.0,
                       "the pacer's rate is finite and positive");
            if (adopted) {
                FUZZ_CHECK(wrc::seq_diff(pacer.rate_seq(), pacer_seq) > 0,
                           "an adopted rate is newer than the one in use");
                FUZZ_CHECK(
                    pacer.rate_pps() >= pp.min_rate_pps && pacer.rate_pps() <= pp.max_rate_pps,
                    "an adopted rate is clamped");
            } else {
                FUZZ_CHECK(pacer.rate_seq() == pacer_seq, "a stale rate is not adopted");
            }
            pacer_seq = pacer.rate_seq();
            if (pacer.next_send() <= now) pacer.on_sent(now);
        }
        FUZZ_CHECK(std::memcmp(again, expect, wrc::kHeaderBytes) == 0,
                   "an accepted datagram re-encodes to its header");
    }
    (void)rc.on_timer(now + 10'000'000'000);
    FUZZ_CHECK(std::isfinite(rc.rate_pps()), "the rate after the last epochs is finite");
    return 0;
}
