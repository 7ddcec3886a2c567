#include <gtest/gtest.h>

#include <vector>

#include "oppsched/daemon/args.h"

using oppsched::daemon::parse_args;

namespace {
oppsched::daemon::daemon_args parse(std::vector<const char*> v) {
    v.insert(v.begin(), "oppsched-x");
    return parse_args(static_cast<int>(v.size()), const_cast<char**>(v.data()));
}
}  // namespace

TEST(daemon_args, config_in_both_spellings_and_check) {
    auto a = parse({"--config", "a.yaml", "--check"});
    EXPECT_EQ(a.config, "a.yaml");
    EXPECT_TRUE(a.check);
    EXPECT_TRUE(a.error.empty());
    EXPECT_EQ(parse({"--config=b.yaml"}).config, "b.yaml");
}

TEST(daemon_args, unknown_argument_and_missing_config_are_errors_naming_them) {
    EXPECT_EQ(parse({"--config", "a.yaml", "--bogus"}).error, "unknown argument '--bogus'");
    EXPECT_EQ(parse({}).error, "--config FILE is required");
    EXPECT_EQ(parse({"--config"}).error, "unknown argument '--config'");  // value missing
    auto h = parse({"--help"});
    EXPECT_TRUE(h.help);
    EXPECT_TRUE(h.error.empty());
}

TEST(daemon_args, schema_needs_no_config) {
    auto s = parse({"--schema"});
    EXPECT_TRUE(s.schema);
    EXPECT_TRUE(s.error.empty());
    EXPECT_FALSE(parse({"--config", "a.yaml"}).schema);
}
