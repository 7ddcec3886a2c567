// The daemons' JSON string literals (oppsched/daemon/json.h): what a JSON reader needs
// escaped is escaped, and nothing else is touched.
#include <gtest/gtest.h>

#include <string>

#include "oppsched/daemon/json.h"

using oppsched::daemon::append_json_string;
using oppsched::daemon::json_string;

TEST(JsonString, when_plain_then_only_quoted) {
    EXPECT_EQ(json_string("scheduler.alpha"), "\"scheduler.alpha\"");
    EXPECT_EQ(json_string(""), "\"\"");
}

TEST(JsonString, when_quotes_and_backslashes_then_escaped) {
    EXPECT_EQ(json_string(R"(a"b\c)"), R"("a\"b\\c")");
}

TEST(JsonString, when_control_characters_then_short_or_unicode_escapes) {
    EXPECT_EQ(json_string("a\nb\rc\td"), R"("a\nb\rc\td")");
    EXPECT_EQ(json_string(std::string("\x01\x1f", 2)), R"("\u0001\u001f")");
    EXPECT_EQ(json_string(std::string("a\0b", 3)), R"("a\u0000b")");
}

TEST(JsonString, when_utf8_then_passed_through) {
    EXPECT_EQ(json_string("\xce\xb1 = 0.1"), "\"\xce\xb1 = 0.1\"");  // α
}

TEST(JsonString, when_appended_then_earlier_text_is_kept) {
    std::string out = "{\"k\": ";
    append_json_string(out, "v\"");
    EXPECT_EQ(out, R"({"k": "v\"")");
}
