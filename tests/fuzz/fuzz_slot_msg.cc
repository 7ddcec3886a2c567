// Fuzz target: the slot_msg PMT converters (gr-oppsched slot_messages.cc), which read the
// dictionaries the PHY blocks exchange with their ZeroMQ bridges. The input builds a PMT
// dictionary: each entry a key (one of the converters' keys, or another symbol) and a value
// of any PMT type the bytes pick (long, uint64, double with NaN/inf, bool, complex,
// u8vector, f32vector, symbol, nil, a nested dict), or a non-dict. Invariants: no converter
// throws; an accepted request, grant or rx report converts back (to_pmt) and reads again to
// the same fields; an rx report accepted by to_rx_indication encodes on the wire and decodes
// to the same message; errors name the key.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/wire.h"
#include "slot_messages.h"

using namespace gr::oppsched;
using oppsched::fuzz::input_reader;

namespace {

const char* const kKeys[] = {"slot",
                             "air_time_ns",
                             "empty",
                             "user",
                             "mcs",
                             "harq_pid",
                             "ndi",
                             "rv",
                             "tb",
                             "slot_estimated",
                             "detected",
                             "header_ok",
                             "tb_bytes",
                             "addressed",
                             "crc_ok",
                             "snr_db",
                             "effective_snr_db",
                             "cqi",
                             "combined",
                             "cfo_hz",
                             "sample",
                             "other",
                             "uplink"};
constexpr std::size_t kNumKeys = sizeof kKeys / sizeof kKeys[0];

double real_of(input_reader& in) {
    const std::uint64_t bits = in.u64();
    double x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

pmt::pmt_t value(input_reader& in, int depth) {
    switch (in.u8() % 12) {
        case 0:
            return pmt::from_long(static_cast<long>(in.u64()));
        case 1:
            return pmt::from_long(static_cast<long>(static_cast<std::int8_t>(in.u8())));
        case 2:
            return pmt::from_uint64(in.u64());
        case 3:
            return pmt::from_double(real_of(in));
        case 4:
            return pmt::from_bool(in.boolean());
        case 5: {
            const double re = real_of(in);  // own statement: arguments are unsequenced
            return pmt::from_complex(re, real_of(in));
        }
        case 6: {
            const std::vector<std::uint8_t> b = in.bytes(in.u8());
            return pmt::init_u8vector(b.size(), b);
        }
        case 7:
            return pmt::make_f32vector(in.u8() % 8, 1.0f);
        case 8:
            return pmt::intern(kKeys[in.u8() % kNumKeys]);
        case 9:
            return pmt::PMT_NIL;
        case 10: {
            if (depth > 2) return pmt::PMT_NIL;
            pmt::pmt_t d = pmt::make_dict();
            const int n = in.u8() % 4;
            for (int i = 0; i < n; ++i) {
                const pmt::pmt_t key = pmt::intern(kKeys[in.u8() % kNumKeys]);
                d = pmt::dict_add(d, key, value(in, depth + 1));
            }
            return d;
        }
        default:
            return pmt::from_long(in.u8());  // small integers: valid field values
    }
}

bool same(const slot_msg::rx_report& a, const slot_msg::rx_report& b) {
    return a.slot == b.slot && a.slot_estimated == b.slot_estimated && a.detected == b.detected &&
           a.header_ok == b.header_ok && a.user == b.user && a.mcs == b.mcs &&
           a.harq_pid == b.harq_pid && a.rv == b.rv && a.ndi == b.ndi && a.tb_bytes == b.tb_bytes &&
           a.addressed == b.addressed && a.crc_ok == b.crc_ok && a.snr_db == b.snr_db &&
           a.effective_snr_db == b.effective_snr_db && a.cqi == b.cqi && a.combined == b.combined &&
           a.cfo_hz == b.cfo_hz && a.sample == b.sample && a.tb == b.tb;
}

bool same(const slot_msg::grant& a, const slot_msg::grant& b) {
    return a.slot == b.slot && a.empty == b.empty && a.uplink == b.uplink && a.user == b.user &&
           a.mcs == b.mcs && a.harq_pid == b.harq_pid && a.rv == b.rv && a.ndi == b.ndi &&
           a.tb == b.tb;
}

void check_error(const std::string& e) { FUZZ_CHECK(e.find(": ") != std::string::npos, e.c_str()); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    input_reader in(data, size);
    pmt::pmt_t m;
    if (in.u8() % 8 == 0) {
        m = value(in, 0);  // any PMT, usually not a dict
    } else {
        m = pmt::make_dict();
        const int n = in.u8() % 24;
        for (int i = 0; i < n; ++i) {
            const pmt::pmt_t key = pmt::intern(kKeys[in.u8() % kNumKeys]);
            m = pmt::dict_add(m, key, value(in, 1));
        }
    }

    const auto req = slot_msg::request_from_pmt(m);
    if (req.ok()) {
        const auto again = slot_msg::request_from_pmt(slot_msg::to_pmt(req.value()));
        FUZZ_CHECK(again.ok() && again->slot == req->slot && again->air_time_ns == req->air_time_ns,
                   "a request converts back to itself");
    } else {
        check_error(req.error());
    }

    const auto g = slot_msg::grant_from_pmt(m);
    if (g.ok()) {
        const auto again = slot_msg::grant_from_pmt(slot_msg::to_pmt(g.value()));
        FUZZ_CHECK(again.ok() && same(again.value(), g.value()), "a grant converts back to itself");
    } else {
        check_error(g.error());
    }

    const auto r = slot_msg::rx_from_pmt(m);
    if (!r.ok()) {
        check_error(r.error());
        return 0;
    }
    const auto again = slot_msg::rx_from_pmt(slot_msg::to_pmt(r.value()));
    FUZZ_CHECK(again.ok() && same(again.value(), r.value()),
               "an rx report converts back to itself");
    for (bool effective : {false, true}) {
        const auto ind = slot_msg::to_rx_indication(r.value(), effective);
        if (!ind.ok()) {
            check_error(ind.error());
            continue;
        }
        FUZZ_CHECK(std::isfinite(ind->snr_db), "the SNR on the wire is finite");
        const auto f = oppsched::wire::decode(oppsched::wire::encode(ind.value(), 1));
        FUZZ_CHECK(f.ok() && std::get<oppsched::wire::rx_indication>(f->msg) == ind.value(),
                   "an rx indication survives the wire");
    }
    return 0;
}
