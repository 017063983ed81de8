# cmake -DIN=file -DOUT=file.c -P embed.cmake: IN's bytes as `const unsigned char
# cg_scalar_bc[]` and its length (no xxd needed).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE ${OUT} "/* generated from k_scalar.bc by embed.cmake */\n#include <stddef.h>\n"
     "const unsigned char cg_scalar_bc[] = {\n${body}};\nconst size_t cg_scalar_bc_len = ${len};\n")
