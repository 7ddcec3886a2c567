# Writes the BPF object IN as a C++ byte array into OUT (cmake -DIN=... -DOUT=... -P), so
# that oppsched-spm-mark carries its program and needs no file beside it.
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUT}" "// Generated from ${IN} by host/spm_mark/embed.cmake: do not edit.\n"
     "#pragma once\n#include <cstddef>\n"
     "alignas(8) static const unsigned char kSpmMarkObject[] = {${bytes}};\n"
     "static constexpr std::size_t kSpmMarkObjectSize = sizeof(kSpmMarkObject);\n")
