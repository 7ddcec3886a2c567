// Fuzz target: oppsched::wire::decode (host/common wire.h), the frames between the PHY and
// the daemons. The first input byte steers, the rest is the frame. With bit 0 set the CRC is
// recomputed over the mutated bytes (and with bit 1 body_len is set to the frame's), so the
// fuzzer reaches the body decoder instead of stopping at the CRC. Invariants: decode never
// throws; an accepted frame re-encodes to exactly its bytes (the decoder accepts one spelling
// of each message: no reserved bit, unknown flag or non-0/1 bool slips through); an error
// names a field ("field: ...").
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"
#include "oppsched/wire.h"

using namespace oppsched;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::uint8_t control = data[0];
    std::vector<std::uint8_t> f(data + 1, data + size);
    if (f.size() >= wire::kHeaderLen + wire::kTrailerLen) {
        if (control & 2u)
            store_be32(&f[12],
                       static_cast<std::uint32_t>(f.size() - wire::kHeaderLen - wire::kTrailerLen));
        if (control & 1u)
            store_be32(&f[f.size() - 4], crc32(f.data(), f.size() - wire::kTrailerLen));
    }
    // An exact-size heap copy, so an overread leaves the allocation (ASan reports it).
    const expected<wire::frame> r = wire::decode(f);
    if (!r.ok()) {
        FUZZ_CHECK(r.error().find(": ") != std::string::npos, r.error().c_str());
        return 0;
    }
    const std::vector<std::uint8_t> again = wire::encode(r->msg, r->seq);
    FUZZ_CHECK(again == f, "an accepted frame re-encodes to its own bytes");
    return 0;
}
