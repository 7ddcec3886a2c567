// config_node (oppsched/daemon/config.h): every error names the dotted field and the value.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "oppsched/daemon/config.h"

namespace oppsched::daemon {
namespace {

// Runs `read` on the parsed text and returns the error message ("" if none).
template <class F>
std::string error_of(const std::string& yaml, F read) {
    try {
        const config_node root = config_node::parse(yaml, "test.yaml");
        read(root);
        root.check_no_unknown_keys();
    } catch (const config_error& e) {
        return e.what();
    }
    return "";
}

void read_aqm(const config_node& root) {
    const config_node p = root.child("aqm").child("params");
    p.get<double>("max_p", 0.1, value_range::open_closed(0, 1));
    p.get<double>("rate_bps", 1e6, value_range::non_negative());
    p.get<std::uint32_t>("limit", 50);
    p.get<bool>("gentle", true);
}

TEST(ConfigReader, when_values_are_valid_then_they_are_read_with_their_types) {
    const auto root =
        config_node::parse("a: {x: 1.5, n: 7, flag: false, name: ue0, list: [1, 2, 3], neg: -3}\n");
    const auto a = root.child("a");
    EXPECT_EQ(a.get<double>("x", 0), 1.5);
    EXPECT_EQ(a.get<std::uint32_t>("n", 0), 7u);
    EXPECT_FALSE(a.get<bool>("flag", true));
    EXPECT_EQ(a.get<std::string>("name", ""), "ue0");
    EXPECT_EQ(a.get<std::vector<int>>("list", {}), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(a.get<int>("neg", 0), -3);
    EXPECT_EQ(a.get<double>("absent", 4.25), 4.25);
    EXPECT_EQ(a.path(), "a");
    EXPECT_NO_THROW(root.check_no_unknown_keys());
}

TEST(ConfigReader, when_a_number_is_out_of_range_then_the_error_names_field_and_value) {
    EXPECT_EQ(error_of("aqm: {params: {max_p: 1.5}}", read_aqm),
              "aqm.params.max_p: 1.5 not in (0,1]");
    EXPECT_EQ(error_of("aqm: {params: {max_p: 0}}", read_aqm), "aqm.params.max_p: 0 not in (0,1]");
}

TEST(ConfigReader, when_a_rate_is_negative_then_it_is_rejected) {
    EXPECT_EQ(error_of("aqm: {params: {rate_bps: -1e6}}", read_aqm),
              "aqm.params.rate_bps: -1e6 not in [0,inf)");
    EXPECT_EQ(error_of("aqm: {params: {limit: -5}}", read_aqm),
              "aqm.params.limit: -5 out of range for a non-negative integer");
}

TEST(ConfigReader, when_a_number_is_nan_or_infinite_then_it_is_rejected) {
    for (const char* v : {".nan", ".NaN", "nan", ".inf", "-.inf", "inf", "1e999"}) {
        EXPECT_EQ(error_of(std::string("aqm: {params: {rate_bps: ") + v + "}}", read_aqm),
                  std::string("aqm.params.rate_bps: ") + v + " is not a finite number")
            << v;
    }
}

// Found by tests/fuzz/fuzz_config.cc: a key starting with a NUL byte gave an error whose
// what() was the empty string.
TEST(ConfigReader, when_a_key_holds_control_bytes_then_the_error_shows_them_escaped) {
    const std::string e = error_of(std::string("{\"\0ab\": 1}", 10), [](const config_node&) {});
    EXPECT_EQ(e.rfind("\\x00ab: unknown key", 0), 0u) << e;
    EXPECT_EQ(e.find('\0'), std::string::npos);
    EXPECT_STREQ(config_error(std::string("a\0b\x7f\n", 5)).what(), "a\\x00b\\x7f\n");
}

TEST(ConfigReader, when_a_key_is_unknown_then_the_error_names_it_and_the_known_ones) {
    const std::string e = error_of("aqm: {params: {max_p: 0.5, maxp: 0.5}}", read_aqm);
    EXPECT_EQ(e.rfind("aqm.params.maxp: unknown key", 0), 0u) << e;
    EXPECT_NE(e.find("max_p"), std::string::npos) << e;
    EXPECT_EQ(error_of("aqm: {params: {}}\nextra: 1", read_aqm).rfind("extra: unknown key", 0), 0u);
    // A whole sub-mapping nobody read is unknown too.
    EXPECT_EQ(error_of("aqm: {params: {}, other: {a: 1}}", read_aqm).rfind("aqm.other: unknown", 0),
              0u);
}

TEST(ConfigReader, when_a_type_is_wrong_then_the_error_names_field_and_value) {
    EXPECT_EQ(error_of("aqm: {params: {max_p: high}}", read_aqm),
              "aqm.params.max_p: 'high' is not a number");
    EXPECT_EQ(error_of("aqm: {params: {max_p: \"0.5\"}}", read_aqm),
              "aqm.params.max_p: '0.5' is not a number");  // quoted: a string
    EXPECT_EQ(error_of("aqm: {params: {limit: 1.5}}", read_aqm),
              "aqm.params.limit: '1.5' is not a non-negative integer");
    EXPECT_EQ(error_of("aqm: {params: {gentle: 1}}", read_aqm),
              "aqm.params.gentle: '1' is not a boolean (true/false)");
    EXPECT_EQ(error_of("aqm: {params: {max_p: [1]}}", read_aqm),
              "aqm.params.max_p: a list is not a number");
    EXPECT_EQ(error_of("aqm: {params: {max_p: }}", read_aqm),
              "aqm.params.max_p: null is not a number");
    EXPECT_EQ(error_of("aqm: {params: 3}", read_aqm), "aqm.params: expected a mapping, got '3'");
}

TEST(ConfigReader, when_an_integer_overflows_its_type_then_it_is_rejected) {
    const auto read = [](const config_node& r) { r.get<std::uint8_t>("rv", 0); };
    EXPECT_EQ(error_of("rv: 256", read), "rv: 256 out of range for a non-negative integer");
    EXPECT_EQ(error_of("rv: 255", read), "");
}

TEST(ConfigReader, when_a_list_element_is_bad_then_the_error_names_its_index) {
    const auto read = [](const config_node& r) {
        r.get<std::vector<double>>("weights", {}, value_range::positive());
    };
    EXPECT_EQ(error_of("weights: [1, 2, -3]", read), "weights[2]: -3 not in (0,inf)");
    EXPECT_EQ(error_of("weights: 3", read), "weights: '3' is not a list of a number");
}

TEST(ConfigReader, when_items_are_read_then_paths_carry_the_index) {
    const auto read = [](const config_node& r) {
        for (const auto& u : r.child("users").items()) u.require<std::uint32_t>("id");
    };
    EXPECT_EQ(error_of("users: [{id: 0}, {id: x}]", read),
              "users[1].id: 'x' is not a non-negative integer");
    EXPECT_EQ(error_of("users: [{id: 0}, {name: a}]", read), "users[1].id: missing (required)");
    EXPECT_EQ(error_of("users: [{id: 0, bad: 1}]", read).rfind("users[0].bad: unknown key", 0), 0u);
}

TEST(ConfigReader, when_a_choice_is_not_allowed_then_the_choices_are_listed) {
    const auto read = [](const config_node& r) { r.get_choice("kind", "pf", {"pf", "rr"}); };
    EXPECT_EQ(error_of("kind: pff", read), "kind: 'pff' not one of pf, rr");
    EXPECT_EQ(error_of("kind: rr", read), "");
}

TEST(ConfigReader, when_a_key_is_repeated_or_the_syntax_is_bad_then_it_is_an_error) {
    EXPECT_EQ(error_of("a: 1\na: 2\n", [](const config_node&) {}), "a: duplicate key");
    const std::string e = error_of("a: [1, 2\n", [](const config_node&) {});
    EXPECT_EQ(e.rfind("test.yaml:", 0), 0u) << e;
    EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
}

TEST(ConfigReader, when_a_value_is_optional_then_null_means_not_set) {
    const auto root = config_node::parse("a: null\nb: 5\nc: ~\n");
    EXPECT_FALSE(root.get_optional<std::uint64_t>("a").has_value());
    EXPECT_EQ(root.get_optional<std::uint64_t>("b").value(), 5u);
    EXPECT_FALSE(root.get_optional<std::uint64_t>("c").has_value());
    EXPECT_FALSE(root.get_optional<std::uint64_t>("d").has_value());
    EXPECT_NO_THROW(root.check_no_unknown_keys());
}

TEST(ConfigReader, when_the_file_is_missing_then_the_error_names_it) {
    try {
        config_node::load_file("/nonexistent/apd.yaml");
        FAIL();
    } catch (const config_error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/apd.yaml: cannot read", 0), 0u);
    }
    const std::string path = ::testing::TempDir() + "/cfg_ok.yaml";
    std::ofstream(path) << "x: 2\n";
    EXPECT_EQ(config_node::load_file(path).require<int>("x"), 2);
    std::remove(path.c_str());
}

TEST(ConfigReader, range_describe_names_open_and_closed_ends) {
    EXPECT_EQ(value_range::open_closed(0, 1).describe(), "(0,1]");
    EXPECT_EQ(value_range::non_negative().describe(), "[0,inf)");
    EXPECT_EQ(value_range::closed(1, 16).describe(), "[1,16]");
    EXPECT_FALSE(value_range::open(0, 1).contains(0));
    EXPECT_TRUE(value_range::closed_open(0, 1).contains(0));
    EXPECT_FALSE(value_range::any().contains(std::nan("")));
}

}  // namespace
}  // namespace oppsched::daemon
