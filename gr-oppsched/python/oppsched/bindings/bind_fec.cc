// Python bindings of the PHY bit chain: MCS table, TB encoder/decoder, HARQ soft buffer,
// control-header codec, mapper, scrambler seeds. Arrays are numpy (complex64 REs, float32
// noise variances / LLRs); TBs are bytes. C++ std::invalid_argument -> ValueError.
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/harq_buffer.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/ldpc_rate_matcher.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/qam_mapper.h>
#include <gnuradio/oppsched/rate_matcher.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/tb_codec.h>
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "bindings.h"

namespace py = pybind11;
using namespace gr::oppsched;

namespace {
using carray = py::array_t<std::complex<float>, py::array::c_style | py::array::forcecast>;
using farray = py::array_t<float, py::array::c_style | py::array::forcecast>;

py::array_t<std::complex<float>> to_numpy(const std::vector<gr_complex>& v) {
    py::array_t<std::complex<float>> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

template <class T>
py::array_t<T> vec_to_numpy(const std::vector<T>& v) {
    py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

std::vector<std::uint8_t> to_vec(const py::bytes& b) {
    const std::string s = b;
    return std::vector<std::uint8_t>(s.begin(), s.end());
}

py::bytes to_bytes(const std::vector<std::uint8_t>& v) {
    return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
}

// noise variance: an array of one value per RE, or a scalar broadcast to every RE
std::vector<float> noise_of(const py::object& nv, std::size_t n) {
    if (py::isinstance<py::float_>(nv) || py::isinstance<py::int_>(nv))
        return std::vector<float>(n, nv.cast<float>());
    const farray a = nv.cast<farray>();
    if (static_cast<std::size_t>(a.size()) != n)
        throw std::invalid_argument("noise_var: " + std::to_string(a.size()) + " values for " +
                                    std::to_string(n) + " REs");
    return std::vector<float>(a.data(), a.data() + a.size());
}
}  // namespace

void bind_fec(py::module& m) {
    py::enum_<code_rate>(m, "code_rate")
        .value("r1_2", code_rate::r1_2)
        .value("r2_3", code_rate::r2_3)
        .value("r3_4", code_rate::r3_4)
        .value("r5_6", code_rate::r5_6);

    py::enum_<viterbi_backend>(m, "viterbi_backend")
        .value("acs16", viterbi_backend::acs16)
        .value("volk8", viterbi_backend::volk8);

    py::class_<mcs_info>(m, "mcs_info")
        .def_readonly("index", &mcs_info::index)
        .def_property_readonly("name", [](const mcs_info& i) { return std::string(i.name); })
        .def_readonly("bits_per_symbol", &mcs_info::bits_per_symbol)
        .def_readonly("rate", &mcs_info::rate)
        .def_readonly("rate_num", &mcs_info::rate_num)
        .def_readonly("rate_den", &mcs_info::rate_den)
        .def_property_readonly("code_rate", &mcs_info::code_rate_value)
        .def_property_readonly("spectral_efficiency", &mcs_info::spectral_efficiency)
        .def("__repr__", [](const mcs_info& i) {
            return "<mcs " + std::to_string(i.index) + ": " + i.name + ">";
        });

    py::class_<mcs_set>(m, "mcs_set")
        .def_property_readonly_static("size", [](py::object) { return mcs_set::size; })
        .def_static("get", &mcs_set::get, py::arg("index"), py::return_value_policy::copy)
        .def_static("all",
                    [] {
                        const auto& a = mcs_set::all();
                        return std::vector<mcs_info>(a.begin(), a.end());
                    })
        .def_static("coded_bits", &mcs_set::coded_bits, py::arg("index"), py::arg("numerology"))
        .def_static("tb_bytes", &mcs_set::tb_bytes, py::arg("index"), py::arg("numerology"))
        .def_static(
            "tb_bytes_for_coded_bits",
            [](int index, std::size_t coded_bits, const std::string& fec) {
                return mcs_set::tb_bytes_for_coded_bits(index, coded_bits, fec_from_string(fec));
            },
            py::arg("index"), py::arg("coded_bits"), py::arg("fec") = "conv")
        .def_static("soft_bits", &mcs_set::soft_bits, py::arg("tb_bytes"), py::arg("index"),
                    py::arg("numerology"))
        .def_static("mother_bits", &mcs_set::mother_bits, py::arg("tb_bytes"))
        .def_static("max_mother_bits", &mcs_set::max_mother_bits, py::arg("numerology"))
        .def_static("lowest_mcs_for_bytes", &mcs_set::lowest_mcs_for_bytes, py::arg("bytes"),
                    py::arg("numerology"))
        .def_static(
            "ldpc_codeword_lengths",
            [](std::size_t tb_bytes, int index, const numerology& n) {
                // the codeword lengths of a TB (ldpc_segmentation, with the numerology's cap)
                const mcs_info& mi = mcs_set::get(index);
                const ldpc_segmentation seg(8 * (tb_bytes + 4), mi.rate,
                                            mcs_set::coded_bits(index, n), n.params().ldpc_max_n);
                std::vector<int> v;
                for (int i = 0; i < seg.codewords(); ++i) v.push_back(seg.codeword_length(i));
                return v;
            },
            py::arg("tb_bytes"), py::arg("index"), py::arg("numerology"),
            "The LDPC codeword lengths of a TB of tb_bytes at MCS index (ldpc_rate_matcher.h).");

    py::class_<rate_matcher>(m, "rate_matcher")
        .def_static("pattern_shift", &rate_matcher::pattern_shift, py::arg("rate"), py::arg("rv"))
        .def_static("kept_bits", &rate_matcher::kept_bits, py::arg("mother_bits"), py::arg("rate"),
                    py::arg("rv"));

    m.def("scrambler_seed_for_slot", &scrambler::seed_for_slot, py::arg("slot_number"),
          "802.11 scrambler seed (1..127) of a slot: 1 + slot mod 127");

    py::class_<qam_mapper>(m, "qam_mapper")
        .def(py::init<int>(), py::arg("bits_per_symbol"))
        .def_property_readonly("bits_per_symbol", &qam_mapper::bits_per_symbol)
        .def("constellation", [](const qam_mapper& q) { return to_numpy(q.constellation()); })
        .def(
            "map",
            [](const qam_mapper& q,
               const py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>& bits) {
                std::vector<std::uint8_t> b(bits.data(), bits.data() + bits.size());
                return to_numpy(q.map(b));
            },
            py::arg("bits"))
        .def(
            "demap",
            [](const qam_mapper& q, const carray& re, const py::object& nv) {
                std::vector<gr_complex> r(re.data(), re.data() + re.size());
                return vec_to_numpy(q.demap(r, noise_of(nv, r.size())));
            },
            py::arg("re"), py::arg("noise_var"));

    py::class_<harq_buffer_stats>(m, "harq_buffer_stats")
        .def_readonly("receptions", &harq_buffer_stats::receptions)
        .def_readonly("new_data_clears", &harq_buffer_stats::new_data_clears)
        .def_readonly("size_mismatch_clears", &harq_buffer_stats::size_mismatch_clears)
        .def_readonly("combined_receptions", &harq_buffer_stats::combined_receptions);

    py::class_<harq_buffer>(m, "harq_buffer")
        .def(py::init<std::size_t>(), py::arg("capacity_mother_bits"))
        .def("begin", &harq_buffer::begin, py::arg("ndi"), py::arg("mother_bits"),
             py::arg("layout") = 0)
        .def("clear", &harq_buffer::clear)
        .def_property_readonly("empty", &harq_buffer::empty)
        .def_property_readonly("ndi", &harq_buffer::ndi)
        .def_property_readonly("capacity", &harq_buffer::capacity)
        .def_property_readonly("mother_bits", &harq_buffer::mother_bits)
        .def_property_readonly("receptions", &harq_buffer::receptions)
        .def_property_readonly("covered_bits", &harq_buffer::covered_bits)
        .def_property_readonly("stats", &harq_buffer::stats)
        .def("soft_bits", [](const harq_buffer& h) { return vec_to_numpy(h.soft_bits()); });

    py::class_<tb_rx_params>(m, "tb_rx_params")
        .def(py::init([](int mcs, int rv, std::size_t tb_bytes, bool ndi, std::uint8_t seed) {
                 return tb_rx_params{mcs, rv, tb_bytes, ndi, seed};
             }),
             py::kw_only(), py::arg("mcs") = 0, py::arg("rv") = 0, py::arg("tb_bytes") = 0,
             py::arg("ndi") = false, py::arg("scrambler_seed") = 1)
        .def_readwrite("mcs", &tb_rx_params::mcs)
        .def_readwrite("rv", &tb_rx_params::rv)
        .def_readwrite("tb_bytes", &tb_rx_params::tb_bytes)
        .def_readwrite("ndi", &tb_rx_params::ndi)
        .def_readwrite("scrambler_seed", &tb_rx_params::scrambler_seed);

    py::class_<tb_decode_stats>(m, "tb_decode_stats")
        .def_readonly("receptions", &tb_decode_stats::receptions)
        .def_readonly("mother_bits", &tb_decode_stats::mother_bits)
        .def_readonly("covered_bits", &tb_decode_stats::covered_bits)
        .def_readonly("mean_abs_llr", &tb_decode_stats::mean_abs_llr)
        .def_readonly("channel_bit_errors", &tb_decode_stats::channel_bit_errors)
        .def_readonly("effective_code_rate", &tb_decode_stats::effective_code_rate)
        .def_readonly("fec_iterations", &tb_decode_stats::fec_iterations);

    py::class_<tb_decode_result>(m, "tb_decode_result")
        .def_property_readonly("bytes", [](const tb_decode_result& r) { return to_bytes(r.bytes); })
        .def_readonly("crc_ok", &tb_decode_result::crc_ok)
        .def_readonly("stats", &tb_decode_result::stats);

    py::class_<tb_encoder>(m, "tb_encoder")
        .def(py::init<const numerology&>(), py::arg("numerology"))
        .def_property_readonly("resource_elements", &tb_encoder::resource_elements)
        .def(
            "encode",
            [](const tb_encoder& e, const py::bytes& tb, int mcs, int rv, std::uint8_t seed) {
                return to_numpy(e.encode(to_vec(tb), mcs, rv, seed));
            },
            py::arg("tb"), py::kw_only(), py::arg("mcs"), py::arg("rv") = 0,
            py::arg("scrambler_seed"),
            "TB bytes -> payload REs (numpy complex64), unit average energy")
        .def(
            "coded_bits",
            [](const tb_encoder& e, const py::bytes& tb, int mcs, int rv, std::uint8_t seed) {
                return vec_to_numpy(e.coded_bits(to_vec(tb), mcs, rv, seed));
            },
            py::arg("tb"), py::kw_only(), py::arg("mcs"), py::arg("rv") = 0,
            py::arg("scrambler_seed"));

    py::class_<tb_decoder>(m, "tb_decoder")
        .def(py::init<const numerology&, viterbi_backend, float>(), py::arg("numerology"),
             py::arg("backend") = viterbi_backend::acs16, py::arg("quant_target") = 0.0f)
        .def_property_readonly("resource_elements", &tb_decoder::resource_elements)
        .def_property_readonly("harq_capacity", &tb_decoder::harq_capacity)
        .def("make_harq_buffer", [](const tb_decoder& d) { return harq_buffer(d.harq_capacity()); })
        .def(
            "decode",
            [](tb_decoder& d, const carray& re, const py::object& nv, harq_buffer& harq, int mcs,
               int rv, std::size_t tb_bytes, bool ndi, std::uint8_t seed) {
                std::vector<gr_complex> r(re.data(), re.data() + re.size());
                return d.decode(r, noise_of(nv, r.size()),
                                tb_rx_params{mcs, rv, tb_bytes, ndi, seed}, harq);
            },
            py::arg("re"), py::arg("noise_var"), py::arg("harq"), py::kw_only(), py::arg("mcs"),
            py::arg("rv") = 0, py::arg("tb_bytes"), py::arg("ndi") = false,
            py::arg("scrambler_seed"),
            "payload REs + noise variance (array per RE or scalar) -> tb_decode_result, "
            "combining in harq")
        .def(
            "decode_params",
            [](tb_decoder& d, const carray& re, const py::object& nv, const tb_rx_params& p,
               harq_buffer& harq) {
                std::vector<gr_complex> r(re.data(), re.data() + re.size());
                return d.decode(r, noise_of(nv, r.size()), p, harq);
            },
            py::arg("re"), py::arg("noise_var"), py::arg("params"), py::arg("harq"));

    py::class_<header_fields>(m, "header_fields")
        .def(py::init([](std::uint16_t user, std::uint8_t mcs, std::uint8_t harq_process, bool ndi,
                         std::uint8_t rv, std::uint16_t tb_bytes, std::uint32_t slot, bool uplink) {
                 return header_fields{user, mcs, harq_process, ndi, rv, tb_bytes, slot, uplink};
             }),
             py::kw_only(), py::arg("user") = 0, py::arg("mcs") = 0, py::arg("harq_process") = 0,
             py::arg("ndi") = false, py::arg("rv") = 0, py::arg("tb_bytes") = 0,
             py::arg("slot") = 0, py::arg("uplink") = false)
        .def_readwrite("user", &header_fields::user)
        .def_readwrite("mcs", &header_fields::mcs)
        .def_readwrite("harq_process", &header_fields::harq_process)
        .def_readwrite("ndi", &header_fields::ndi)
        .def_readwrite("rv", &header_fields::rv)
        .def_readwrite("tb_bytes", &header_fields::tb_bytes)
        .def_readwrite("slot", &header_fields::slot)
        .def_readwrite("uplink", &header_fields::uplink)
        .def(py::self == py::self)
        .def("__repr__", [](const header_fields& h) {
            return "<header_fields user=" + std::to_string(h.user) +
                   " mcs=" + std::to_string(h.mcs) +
                   " harq_process=" + std::to_string(h.harq_process) +
                   " ndi=" + std::to_string(h.ndi) + " rv=" + std::to_string(h.rv) +
                   " tb_bytes=" + std::to_string(h.tb_bytes) + " slot=" + std::to_string(h.slot) +
                   (h.uplink ? " uplink" : "") + ">";
        });

    auto unwrap = [](::oppsched::expected<header_fields> r) {
        if (!r.ok()) throw std::invalid_argument(r.error());
        return r.value();
    };
    py::class_<header_codec>(m, "header_codec")
        .def(py::init<const numerology&>(), py::arg("numerology"))
        .def_property_readonly("resource_elements", &header_codec::resource_elements)
        .def_property_readonly("bits_per_symbol", &header_codec::bits_per_symbol)
        .def(
            "encode",
            [](const header_codec& c, const header_fields& h) { return to_numpy(c.encode(h)); },
            py::arg("fields"))
        .def(
            "decode",
            [unwrap](header_codec& c, const carray& re, const py::object& nv) {
                std::vector<gr_complex> r(re.data(), re.data() + re.size());
                return unwrap(c.decode(r, noise_of(nv, r.size())));
            },
            py::arg("re"), py::arg("noise_var"),
            "header REs -> header_fields; raises ValueError naming the failure (bad CRC, ...)")
        .def(
            "pack",
            [](const header_codec& c, const header_fields& h) {
                const auto b = c.pack(h);
                return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
            },
            py::arg("fields"))
        .def(
            "unpack",
            [unwrap](const header_codec& c, const py::bytes& b) {
                const auto v = to_vec(b);
                if (v.size() != header_codec::packed_bytes)
                    throw std::invalid_argument("header: " + std::to_string(v.size()) +
                                                " bytes, expected 12");
                return unwrap(c.unpack(v.data()));
            },
            py::arg("data"))
        .def_static(
            "crc16",
            [](const py::bytes& b) {
                const auto v = to_vec(b);
                return header_codec::crc16(v.data(), v.size());
            },
            py::arg("data"));
}
