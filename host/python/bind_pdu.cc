// Python bindings of oppsched/crc32.h, oppsched/pdu.h and oppsched/segmentation.h:
// crc32, serialize_pdu / parse_pdu (standard format), serialize_compact_pdu /
// parse_compact_pdu (compact format), pdu_format, Segmenter, Reassembler. Errors become
// ValueError with the C++ message (field and value).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "oppsched/crc32.h"
#include "oppsched/pdu.h"
#include "oppsched/segmentation.h"
#include "oppsched/validation.h"

namespace oppsched::py {
namespace {

template <class T>
T range_checked(const pybind11::handle& h, const char* field, long long lo, long long hi) {
    const long long v = h.cast<long long>();
    if (v < lo || v > hi)
        throw_invalid(field, v, "not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return static_cast<T>(v);
}

pybind11::dict record_dict(const pdu::tb_record& r) {
    pybind11::dict d;
    d["user"] = r.user;
    d["seq"] = r.seq;
    d["tb_bytes"] = r.tb_bytes;
    d["padding"] = r.padding;
    d["data_bytes"] = r.data_bytes;
    d["session"] = r.session;
    pybind11::list segs;
    for (const auto& s : r.segments) {
        pybind11::dict sd;
        sd["packet_id"] = s.packet_id;
        sd["packet_seq"] = s.packet_seq;
        sd["packet_len"] = s.packet_len;
        sd["offset"] = s.offset;
        sd["seg_len"] = s.seg_len;
        sd["first"] = s.first();
        sd["last"] = s.last();
        segs.append(sd);
    }
    d["segments"] = segs;
    return d;
}

pybind11::dict pdu_dict(const pdu::mac_pdu& p, std::size_t padding) {
    pybind11::dict d;
    d["user"] = p.header.user;
    d["seq"] = p.header.seq;
    d["price"] = p.header.price_s ? pybind11::cast(*p.header.price_s) : pybind11::none();
    d["session"] = p.header.session ? pybind11::cast(*p.header.session) : pybind11::none();
    pybind11::list segs;
    for (const auto& s : p.segments) {
        pybind11::dict sd;
        sd["packet_seq"] = s.packet_seq;
        sd["packet_len"] = s.packet_len;
        sd["offset"] = s.offset;
        sd["data"] = to_bytes(s.data);
        sd["first"] = s.first();
        sd["last"] = s.last();
        segs.append(sd);
    }
    d["segments"] = segs;
    d["padding"] = padding;
    return d;
}

pdu::pdu_format format_named(const std::string& name, const char* field) {
    const auto f = pdu::pdu_format_from_string(name);
    if (!f) throw_invalid(std::string(field) + ": '" + name + "' is not standard or compact");
    return *f;
}

pybind11::dict compact_dict(const pdu::compact_view& v) {
    pybind11::dict d;
    d["format"] = "compact";
    d["seq"] = v.seq;
    d["price"] = v.price_s ? pybind11::cast(*v.price_s) : pybind11::none();
    d["session"] = v.session ? pybind11::cast(*v.session) : pybind11::none();
    d["header_bytes"] = v.header_bytes;
    d["first"] = v.first ? pybind11::cast(*v.first) : pybind11::none();
    d["continuation"] = pybind11::bytes(reinterpret_cast<const char*>(v.payload), v.continuation);
    pybind11::list pkts;
    for (const auto& p : v.packets) {
        pybind11::dict pd;
        pd["data"] = pybind11::bytes(reinterpret_cast<const char*>(v.payload + p.offset), p.bytes);
        pd["packet_len"] = p.packet_len ? pybind11::cast(*p.packet_len) : pybind11::none();
        pd["complete"] = p.complete();
        pkts.append(pd);
    }
    d["packets"] = pkts;
    d["padding"] = v.padding;
    return d;
}

pybind11::list delivered_list(const pdu::reassembler::delivered_packets& v) {
    pybind11::list l;
    for (const auto& p : v) l.append(to_bytes(p));
    return l;
}

}  // namespace

void bind_pdu(pybind11::module_& m) {
    m.def(
        "crc32",
        [](const pybind11::bytes& data, std::uint32_t crc) {
            const std::string s = data;
            return oppsched::crc32(reinterpret_cast<const std::uint8_t*>(s.data()), s.size(), crc);
        },
        pybind11::arg("data"), pybind11::kw_only(), pybind11::arg("crc") = 0,
        "CRC-32 (IEEE 802.3 / zlib), chainable like zlib.crc32.");

    m.attr("PDU_HEADER_BYTES") = pdu::kHeaderBytes;
    m.attr("PDU_SEGMENT_HEADER_BYTES") = pdu::kSegmentHeaderBytes;
    m.attr("PDU_MIN_BYTES") = pdu::kMinPduBytes;
    m.attr("PDU_SESSION_BYTES") = pdu::kSessionBytes;
    m.attr("PDU_COMPACT_HEADER_BYTES") = pdu::kCompactHeaderBytes;
    m.attr("PDU_COMPACT_PRICE_BYTES") = pdu::kCompactPriceBytes;
    m.attr("PDU_COMPACT_MIN_BYTES") = pdu::kCompactMinPduBytes;
    m.attr("PDU_COMPACT_NO_START") = pdu::kCompactNoStart;
    m.attr("PDU_COMPACT_SEQ_BITS") = pdu::kCompactSeqBits;
    m.attr("PDU_COMPACT_MAX_WINDOW") = pdu::kCompactMaxWindow;
    m.attr("PDU_FORMATS") = pybind11::make_tuple("standard", "compact");

    m.def(
        "pdu_format",
        [](const pybind11::bytes& data) {
            const std::string s = data;
            const auto f =
                s.empty() ? std::nullopt : pdu::format_of(static_cast<std::uint8_t>(s[0]));
            if (!f)
                throw_invalid(s.empty() ? std::string("pdu.length: 0 bytes, need >= 1")
                                        : "pdu.format: byte 0 " +
                                              std::to_string(static_cast<std::uint8_t>(s[0])) +
                                              " is neither standard (1) nor compact (128..191)");
            return std::string(pdu::to_string(*f));
        },
        pybind11::arg("data"), "The format of a PDU from its first byte: 'standard' or 'compact'.");

    m.def(
        "min_usable_tb_bytes",
        [](const std::string& format) {
            return pdu::min_usable_tb_bytes(format_named(format, "pdu.format"));
        },
        pybind11::arg("format"),
        "The smallest TB that carries a byte of data: 29 (standard) or 5 (compact).");

    m.def(
        "serialize_compact_pdu",
        [](long long seq, long long tb_bytes, const pybind11::bytes& continuation,
           const pybind11::list& packets, std::optional<float> price,
           std::optional<long long> session) {
            pdu::compact_pdu p;
            if (session)
                p.session = range_checked<std::uint16_t>(pybind11::int_(*session), "pdu.session", 0,
                                                         0xFFFF);
            p.seq = range_checked<std::uint16_t>(pybind11::int_(seq), "pdu.seq", 0,
                                                 pdu::kCompactSeqMask);
            p.price_s = price;
            p.continuation = to_vec(continuation);
            for (const auto& item : packets)
                p.packets.push_back(to_vec(item.cast<pybind11::bytes>()));
            if (tb_bytes < 0)
                throw_invalid("pdu.tb_bytes: " + std::to_string(tb_bytes) + " is negative");
            auto r = pdu::serialize_compact(p, static_cast<std::size_t>(tb_bytes));
            if (!r) throw_invalid(r.error());
            return to_bytes(r.value());
        },
        pybind11::kw_only(), pybind11::arg("seq"), pybind11::arg("tb_bytes"),
        pybind11::arg("continuation") = pybind11::bytes(),
        pybind11::arg("packets") = pybind11::list(), pybind11::arg("price") = pybind11::none(),
        pybind11::arg("session") = pybind11::none(),
        "Serialise a compact MAC PDU (pdu.h) into exactly tb_bytes bytes: `continuation` "
        "(bytes ending a packet begun earlier, or filling the payload), then `packets` (IP "
        "packets as bytes; the last may be cut and must then reach the TB's end). price: "
        "CLAMP price in seconds, or None; session: the MAC session trailer (0..65535) or None.");

    m.def(
        "parse_compact_pdu",
        [](const pybind11::bytes& data) {
            const std::string s = data;
            auto v =
                pdu::parse_compact_view(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
            if (!v) throw_invalid(v.error());
            return compact_dict(v.value());
        },
        pybind11::arg("data"),
        "Parse a compact MAC PDU into a dict (format, seq, price, session, header_bytes, first "
        "(None: "
        "no packet starts), continuation, packets [{data, packet_len (None: header cut off), "
        "complete}], padding); ValueError naming the field and value if malformed.");

    m.def(
        "serialize_pdu",
        [](int user, long long seq, const pybind11::list& segments, long long tb_bytes,
           std::optional<float> price, std::optional<long long> session) {
            pdu::mac_pdu p;
            if (session)
                p.header.session = range_checked<std::uint16_t>(pybind11::int_(*session),
                                                                "pdu.session", 0, 0xFFFF);
            p.header.user =
                range_checked<std::uint16_t>(pybind11::int_(user), "pdu.user", 0, 0xFFFF);
            p.header.seq =
                range_checked<std::uint32_t>(pybind11::int_(seq), "pdu.seq", 0, 0xFFFFFFFFll);
            p.header.price_s = price;
            for (const auto& item : segments) {
                const auto d = item.cast<pybind11::dict>();
                pdu::pdu_segment s;
                s.packet_seq =
                    range_checked<std::uint16_t>(d["packet_seq"], "segment.packet_seq", 0, 0xFFFF);
                s.offset = d.contains("offset") ? range_checked<std::uint16_t>(
                                                      d["offset"], "segment.offset", 0, 0xFFFF)
                                                : 0;
                s.data = to_vec(d["data"].cast<pybind11::bytes>());
                s.packet_len = d.contains("packet_len")
                                   ? range_checked<std::uint16_t>(d["packet_len"],
                                                                  "segment.packet_len", 0, 0xFFFF)
                                   : static_cast<std::uint16_t>(
                                         std::min<std::size_t>(s.offset + s.data.size(), 0xFFFF));
                p.segments.push_back(std::move(s));
            }
            if (tb_bytes < 0)
                throw_invalid("pdu.tb_bytes: " + std::to_string(tb_bytes) + " is negative");
            auto r = pdu::serialize(p, static_cast<std::size_t>(tb_bytes));
            if (!r) throw_invalid(r.error());
            return to_bytes(r.value());
        },
        pybind11::kw_only(), pybind11::arg("user"), pybind11::arg("seq"), pybind11::arg("segments"),
        pybind11::arg("tb_bytes"), pybind11::arg("price") = pybind11::none(),
        pybind11::arg("session") = pybind11::none(),
        "Serialise a MAC PDU into exactly tb_bytes bytes. segments: list of dicts with "
        "packet_seq, data (bytes), and optionally offset (0) and packet_len (offset + "
        "len(data)). price: CLAMP price in seconds, or None; session: the MAC session "
        "trailer (0..65535) or None.");

    m.def(
        "parse_pdu",
        [](const pybind11::bytes& data) {
            const std::string s = data;
            const auto* d = reinterpret_cast<const std::uint8_t*>(s.data());
            auto v = pdu::parse_view(d, s.size());
            if (!v) throw_invalid(v.error());
            auto r = pdu::parse(d, s.size());
            return pdu_dict(r.value(), v->padding);
        },
        pybind11::arg("data"),
        "Parse a MAC PDU into a dict (user, seq, price, session, segments, padding); ValueError "
        "naming the field and value if malformed.");

    pybind11::class_<pdu::segmenter>(m, "segmenter",
                                     "Fills TBs of a user from a packet source (one per user).")
        .def(pybind11::init([](int user, long long first_seq, int first_packet_seq,
                               const std::string& format, std::optional<long long> session) {
                 pdu::segmenter_params p;
                 if (session)
                     p.session = range_checked<std::uint16_t>(pybind11::int_(*session),
                                                              "segmenter.session", 0, 0xFFFF);
                 p.format = format_named(format, "segmenter.format");
                 p.user = range_checked<std::uint16_t>(pybind11::int_(user), "segmenter.user", 0,
                                                       0xFFFF);
                 p.first_seq = range_checked<std::uint32_t>(pybind11::int_(first_seq),
                                                            "segmenter.first_seq", 0, 0xFFFFFFFFll);
                 p.first_packet_seq = range_checked<std::uint16_t>(
                     pybind11::int_(first_packet_seq), "segmenter.first_packet_seq", 0, 0xFFFF);
                 return std::make_unique<pdu::segmenter>(p);
             }),
             pybind11::kw_only(), pybind11::arg("user") = 0, pybind11::arg("first_seq") = 0,
             pybind11::arg("first_packet_seq") = 0, pybind11::arg("format") = "standard",
             pybind11::arg("session") = pybind11::none())
        .def(
            "build",
            [](pdu::segmenter& s, std::size_t tb_bytes, pybind11::object source,
               std::optional<float> price) {
                // The source returns bytes, (bytes, id) or None; ids default to a counter.
                std::uint64_t auto_id = s.stats().packets_started + s.stats().packets_rejected;
                pdu::packet_source src;
                if (!source.is_none()) {
                    src = [&source, &auto_id]() -> std::optional<ip_packet> {
                        pybind11::object o = source();
                        if (o.is_none()) return std::nullopt;
                        ip_packet p;
                        if (pybind11::isinstance<pybind11::tuple>(o)) {
                            auto t = o.cast<pybind11::tuple>();
                            p.data = to_vec(t[0].cast<pybind11::bytes>());
                            p.id = t[1].cast<std::uint64_t>();
                        } else {
                            p.data = to_vec(o.cast<pybind11::bytes>());
                            p.id = auto_id;
                        }
                        ++auto_id;
                        return p;
                    };
                }
                pdu::built_tb tb = s.build(tb_bytes, src, price);
                return pybind11::make_tuple(to_bytes(tb.bytes), record_dict(tb.record));
            },
            pybind11::arg("tb_bytes"), pybind11::arg("source"), pybind11::kw_only(),
            pybind11::arg("price") = pybind11::none(),
            "Build the next TB: returns (pdu_bytes, record). source() returns bytes, "
            "(bytes, packet_id) or None when the queue is empty. If source raises, the "
            "exception propagates and the packets pulled for this TB are lost.")
        .def_property_readonly("next_seq", &pdu::segmenter::next_seq)
        .def_property_readonly("next_packet_seq", &pdu::segmenter::next_packet_seq)
        .def_property_readonly("has_partial", &pdu::segmenter::has_partial)
        .def_property_readonly("partial_remaining", &pdu::segmenter::partial_remaining)
        .def("abandon_partial", &pdu::segmenter::abandon_partial)
        .def("session_acked", &pdu::segmenter::session_acked,
             "The client ACKed a PDU that carried the session: stop writing it.")
        .def_property_readonly("announcing_session", &pdu::segmenter::announcing_session)
        .def_property_readonly("stats",
                               [](const pdu::segmenter& s) { return stats_to_dict(s.stats()); });

    pybind11::class_<pdu::reassembler>(m, "reassembler",
                                       "In-order delivery of a user's packets from decoded "
                                       "PDUs, with reordering window, timeout and memory cap.")
        .def(pybind11::init([](std::optional<int> user, long long first_seq, int first_packet_seq,
                               long long window, time_ns timeout_ns, long long max_bytes,
                               long long max_ahead) {
                 pdu::reassembler_params p;
                 if (user)
                     p.user = range_checked<std::uint16_t>(pybind11::int_(*user),
                                                           "reassembler.user", 0, 0xFFFF);
                 p.first_seq = range_checked<std::uint32_t>(
                     pybind11::int_(first_seq), "reassembler.first_seq", 0, 0xFFFFFFFFll);
                 p.first_packet_seq = range_checked<std::uint16_t>(
                     pybind11::int_(first_packet_seq), "reassembler.first_packet_seq", 0, 0xFFFF);
                 p.window = range_checked<std::uint32_t>(pybind11::int_(window),
                                                         "reassembler.window", 0, 0xFFFFFFFFll);
                 p.timeout = timeout_ns;
                 if (max_bytes < 0)
                     throw_invalid("reassembler.max_bytes: " + std::to_string(max_bytes) +
                                   " is negative");
                 p.max_bytes = static_cast<std::size_t>(max_bytes);
                 p.max_ahead = range_checked<std::uint32_t>(
                     pybind11::int_(max_ahead), "reassembler.max_ahead", 1, 0xFFFFFFFFll);
                 return std::make_unique<pdu::reassembler>(p);
             }),
             pybind11::kw_only(), pybind11::arg("user") = pybind11::none(),
             pybind11::arg("first_seq") = 0, pybind11::arg("first_packet_seq") = 0,
             pybind11::arg("window") = 64, pybind11::arg("timeout_ns") = 50 * kNsPerMs,
             pybind11::arg("max_bytes") = 1 << 20, pybind11::arg("max_ahead") = 1024)
        .def(
            "on_pdu",
            [](pdu::reassembler& r, const pybind11::bytes& data, time_ns now_ns) {
                const std::string s = data;
                return delivered_list(
                    r.on_pdu(reinterpret_cast<const std::uint8_t*>(s.data()), s.size(), now_ns));
            },
            pybind11::arg("data"), pybind11::arg("now_ns"),
            "A decoded PDU; returns the packets (bytes) now deliverable, in order.")
        .def(
            "on_lost",
            [](pdu::reassembler& r, std::uint32_t seq, time_ns now_ns) {
                return delivered_list(r.on_lost(seq, now_ns));
            },
            pybind11::arg("seq"), pybind11::arg("now_ns"),
            "The AP reports PDU seq lost after its last HARQ attempt.")
        .def(
            "poll",
            [](pdu::reassembler& r, time_ns now_ns) { return delivered_list(r.poll(now_ns)); },
            pybind11::arg("now_ns"))
        .def_property_readonly("next_deadline", &pdu::reassembler::next_deadline)
        .def_property_readonly("held_bytes", &pdu::reassembler::held_bytes)
        .def_property_readonly("next_seq", &pdu::reassembler::next_seq)
        .def_property_readonly("session", &pdu::reassembler::session,
                               "The AP's MAC session this stream follows, or None.")
        .def_property_readonly(
            "format",
            [](const pdu::reassembler& r) -> std::optional<std::string> {
                if (!r.format()) return std::nullopt;
                return std::string(pdu::to_string(*r.format()));
            },
            "The stream's PDU format ('standard' or 'compact', from its first PDU), or None.")
        .def_property_readonly("stats",
                               [](const pdu::reassembler& r) { return stats_to_dict(r.stats()); });
}

}  // namespace oppsched::py
