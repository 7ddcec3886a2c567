#pragma once
namespace oppsched {
// Version of the MAC library, as written into traces and summaries.
const char* version();
}  // namespace oppsched
