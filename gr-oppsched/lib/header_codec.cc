#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/scrambler.h>

#include <stdexcept>
#include <string>

#include "oppsched/byte_order.h"

namespace gr {
namespace oppsched {

namespace {

std::size_t header_res(const numerology& n) {
    return static_cast<std::size_t>(n.header_resource_elements());
}

int header_bps(const numerology& n) {
    const std::size_t re = header_res(n);
    if (re >= static_cast<std::size_t>(header_codec::coded_bits)) return 1;
    if (2 * re >= static_cast<std::size_t>(header_codec::coded_bits)) return 2;
    throw std::invalid_argument(
        "numerology.header_symbols: " + std::to_string(n.params().header_symbols) + " gives " +
        std::to_string(re) + " header REs; the header needs >= 96 (QPSK) or >= 192 (BPSK)");
}

int header_ncbps(const numerology& n) {
    const std::size_t nc = header_res(n) * static_cast<std::size_t>(header_bps(n));
    if (nc % 16 != 0)
        throw std::invalid_argument(
            "numerology.data_carriers: " + std::to_string(n.params().data_carriers) +
            " gives a header block of " + std::to_string(nc) + " coded bits, not a multiple of 16");
    return static_cast<int>(nc);
}

// MSB-first bit writer / reader over a byte array.
struct bit_writer {
    std::uint8_t* p;
    std::size_t pos = 0;
    void put(std::uint32_t v, int nbits) {
        for (int i = nbits - 1; i >= 0; --i, ++pos) {
            const std::uint8_t bit = (v >> i) & 1u;
            p[pos / 8] = static_cast<std::uint8_t>(p[pos / 8] | (bit << (7 - pos % 8)));
        }
    }
};
struct bit_reader {
    const std::uint8_t* p;
    std::size_t pos = 0;
    std::uint32_t get(int nbits) {
        std::uint32_t v = 0;
        for (int i = 0; i < nbits; ++i, ++pos) v = (v << 1) | ((p[pos / 8] >> (7 - pos % 8)) & 1u);
        return v;
    }
};

::oppsched::error_info err(std::string m) {
    return ::oppsched::error_info{"header: " + std::move(m)};
}

}  // namespace

std::uint16_t header_codec::crc16(const std::uint8_t* data, std::size_t len) {
    std::uint16_t crc = 0xFFFF;
    for (std::size_t i = 0; i < len; ++i) {
        crc = static_cast<std::uint16_t>(crc ^ (static_cast<std::uint16_t>(data[i]) << 8));
        for (int b = 0; b < 8; ++b)
            crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                 : static_cast<std::uint16_t>(crc << 1);
    }
    return crc;
}

header_codec::header_codec(const numerology& n)
    : d_num(n),
      d_re(header_res(n)),
      d_bps(header_bps(n)),
      d_il(header_ncbps(n), d_bps),
      d_map(d_bps),
      d_vit(info_bits) {}

void header_codec::validate(const header_fields& h) const {
    if (h.mcs >= mcs_set::size)
        throw std::invalid_argument("header.mcs: " + std::to_string(h.mcs) + " not in [0,7]");
    if (h.harq_process > 15)
        throw std::invalid_argument("header.harq_process: " + std::to_string(h.harq_process) +
                                    " not in [0,15]");
    if (h.rv > 3)
        throw std::invalid_argument("header.rv: " + std::to_string(h.rv) + " not in [0,3]");
    const std::size_t max = mcs_set::tb_bytes(h.mcs, d_num);
    if (h.tb_bytes > max)
        throw std::invalid_argument("header.tb_bytes: " + std::to_string(h.tb_bytes) +
                                    " not in [0," + std::to_string(max) + "] for mcs " +
                                    std::to_string(h.mcs));
}

std::array<std::uint8_t, header_codec::packed_bytes> header_codec::pack(
    const header_fields& h) const {
    validate(h);
    std::array<std::uint8_t, packed_bytes> b{};
    bit_writer w{b.data()};
    w.put(h.user, 16);
    w.put(h.mcs, 4);
    w.put(h.harq_process, 4);
    w.put(h.ndi ? 1u : 0u, 1);
    w.put(h.rv, 2);
    w.put(h.tb_bytes, 16);
    w.put(h.slot, 32);
    w.put(h.uplink ? 1u : 0u, 1);
    w.put(0, reserved_bits);
    ::oppsched::store_be16(b.data() + 10, crc16(b.data(), 10));  // bits 80..95
    return b;
}

::oppsched::expected<header_fields> header_codec::unpack(const std::uint8_t* bytes) const {
    bit_reader r{bytes};
    header_fields h;
    h.user = static_cast<std::uint16_t>(r.get(16));
    h.mcs = static_cast<std::uint8_t>(r.get(4));
    h.harq_process = static_cast<std::uint8_t>(r.get(4));
    h.ndi = r.get(1) != 0;
    h.rv = static_cast<std::uint8_t>(r.get(2));
    h.tb_bytes = static_cast<std::uint16_t>(r.get(16));
    h.slot = r.get(32);
    h.uplink = r.get(1) != 0;
    const std::uint32_t reserved = r.get(reserved_bits);
    if (::oppsched::load_be16(bytes + 10) != crc16(bytes, 10)) return err("CRC-16 mismatch");
    if (reserved != 0) return err("reserved bits: " + std::to_string(reserved) + " not 0");
    if (h.mcs >= mcs_set::size) return err("mcs: " + std::to_string(h.mcs) + " not in [0,7]");
    const std::size_t max = mcs_set::tb_bytes(h.mcs, d_num);
    if (h.tb_bytes > max)
        return err("tb_bytes: " + std::to_string(h.tb_bytes) + " > " + std::to_string(max) +
                   " for mcs " + std::to_string(h.mcs));
    return h;
}

void header_codec::encode(const header_fields& h, gr_complex* out) const {
    const auto bytes = pack(h);
    std::array<std::uint8_t, info_bits> info{};
    for (int i = 0; i < info_bits; ++i)
        info[static_cast<std::size_t>(i)] =
            (bytes[static_cast<std::size_t>(i / 8)] >> (7 - i % 8)) & 1u;
    std::array<std::uint8_t, coded_bits> coded{};
    conv_encoder_k7::encode_tail_biting(info.data(), info.size(), coded.data());
    scrambler s(header_scrambler_seed);
    s.apply(coded.data(), coded.size());
    const std::size_t n = d_re * static_cast<std::size_t>(d_bps);
    std::vector<std::uint8_t> rep(n), il(n);
    for (std::size_t i = 0; i < n; ++i) rep[i] = coded[i % coded_bits];
    d_il.interleave(rep.data(), il.data(), n);
    d_map.map(il.data(), n, out);
}

std::vector<gr_complex> header_codec::encode(const header_fields& h) const {
    std::vector<gr_complex> out(d_re);
    encode(h, out.data());
    return out;
}

::oppsched::expected<header_fields> header_codec::decode(const gr_complex* re,
                                                         const float* noise_var, std::size_t n_re) {
    if (re == nullptr || noise_var == nullptr) return err("no REs");
    if (n_re != d_re)
        return err("n_re: " + std::to_string(n_re) + " REs, expected " + std::to_string(d_re));
    const std::size_t n = d_re * static_cast<std::size_t>(d_bps);
    d_llr.resize(n);
    d_llr2.resize(n);
    d_map.demap(re, noise_var, n_re, d_llr.data());  // non-finite inputs become erasures
    d_il.deinterleave(d_llr.data(), d_llr2.data(), n);
    // Descramble the repeated copies: the scrambler runs over the 192 coded bits once, and
    // every copy of coded bit j was scrambled with the same sequence bit j.
    d_fold.assign(coded_bits, 0.0f);
    for (std::size_t i = 0; i < n; ++i) d_fold[i % coded_bits] += d_llr2[i];
    scrambler s(header_scrambler_seed);
    s.apply_llr(d_fold.data(), d_fold.size());
    d_bits.resize(info_bits);
    d_vit.decode(d_fold.data(), info_bits, termination::tail_biting, d_bits.data());
    std::array<std::uint8_t, packed_bytes> bytes{};
    for (int i = 0; i < info_bits; ++i)
        bytes[static_cast<std::size_t>(i / 8)] =
            static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i / 8)] |
                                      (d_bits[static_cast<std::size_t>(i)] << (7 - i % 8)));
    return unpack(bytes.data());
}

::oppsched::expected<header_fields> header_codec::decode(const std::vector<gr_complex>& re,
                                                         const std::vector<float>& noise_var) {
    if (noise_var.size() != re.size())
        return err("noise_var: " + std::to_string(noise_var.size()) + " values for " +
                   std::to_string(re.size()) + " REs");
    return decode(re.data(), noise_var.data(), re.size());
}

}  // namespace oppsched
}  // namespace gr
