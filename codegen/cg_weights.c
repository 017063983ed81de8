/* cg_weights.c — a model's initial weights (rt_tensor_info.data: the initializers of an ONNX
 * model) as an ELF object of their own, written straight from the descriptor's data. They do
 * not go through LLVM: as constants in the module they were copied several times (constant,
 * object buffer, file) and took most of the compile time and memory of a large model. The
 * descriptor's constants (cpu/cg_aot.c) point into this object's one symbol, which the link
 * puts in the .so beside them. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg.h"

static int64_t cg_weights_bytes(const rt_tensor_info *t) { return t->data ? k_shape_numel(&t->shape) * 4 : 0; }

static int64_t cg_weights_round(int64_t n) { return (n + CG_WEIGHTS_ALIGN - 1) / CG_WEIGHTS_ALIGN * CG_WEIGHTS_ALIGN; }

int64_t cg_weights_layout(const rt_model_desc *d, int64_t *offset) {
  int64_t at = 0;
  for (int i = 0; i < d->ntensors; i++) {
    int64_t n = cg_weights_bytes(&d->tensors[i]);
    if (offset) offset[i] = n ? at : -1;
    at += cg_weights_round(n);
  }
  return at;
}

/* ---- the object: header, the blob, .note.GNU-stack, symbol and string tables ---- */

enum { CG_W_NULL, CG_W_DATA, CG_W_STACK, CG_W_SYMTAB, CG_W_STRTAB, CG_W_SHSTRTAB, CG_W_NSECT };

/* Section names, in section order; .shstrtab holds them one after the other. */
static const char *const cg_w_names[CG_W_NSECT] = {"", ".rodata.kiln_weights", ".note.GNU-stack", ".symtab", ".strtab",
                                                   ".shstrtab"};
static const char cg_w_str[] = "\0" CG_WEIGHTS_SYMBOL;   /* .strtab: the empty name, then the symbol's */

/* What follows the blob, built in memory (a few hundred bytes). */
typedef struct {
  Elf64_Sym sym[2];
  char str[sizeof cg_w_str], shstr[96];   /* the names of cg_w_names: 64 bytes */
  Elf64_Shdr sh[CG_W_NSECT];
} cg_w_tail;

/* The model object's ELF header: the weights object takes its class, byte order, machine
 * and flags, so the linker sees the two as one target. Only ELF64 of the host's byte order
 * (the data are written as they are in memory). */
static int cg_w_like(const char *model_obj, Elf64_Ehdr *eh, char *err, size_t n) {
  int fd = open(model_obj, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return rt_errf(err, n, "cannot read '%s': %s", model_obj, strerror(errno));
  ssize_t r = read(fd, eh, sizeof *eh);
  close(fd);
  const uint16_t one = 1;
  unsigned char host = *(const unsigned char *)&one ? ELFDATA2LSB : ELFDATA2MSB;
  if (r != (ssize_t)sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_ident[EI_DATA] != host)
    return rt_errf(err, n, "'%s' is not a 64-bit ELF object of this machine's byte order; the weights object needs one",
                   model_obj);
  return 0;
}

static Elf64_Shdr cg_w_sect(Elf64_Word name, Elf64_Word type, Elf64_Xword flags, Elf64_Off off, Elf64_Xword size,
                            Elf64_Xword align) {
  return (Elf64_Shdr){.sh_name = name, .sh_type = type, .sh_flags = flags, .sh_offset = off, .sh_size = size,
                      .sh_addralign = align};
}

/* The blob starts right after the header (64 bytes, so aligned); the tail after it. */
static void cg_w_build(Elf64_Ehdr *eh, cg_w_tail *t, int64_t blob) {
  Elf64_Off tail = sizeof *eh + (Elf64_Off)blob;
  memset(t, 0, sizeof *t);
  t->sym[1] = (Elf64_Sym){.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), .st_other = STV_HIDDEN,
                          .st_shndx = CG_W_DATA, .st_size = (Elf64_Xword)blob};
  memcpy(t->str, cg_w_str, sizeof cg_w_str);
  Elf64_Word at[CG_W_NSECT], len = 0;
  for (int i = 0; i < CG_W_NSECT; i++) {
    at[i] = len;
    memcpy(t->shstr + len, cg_w_names[i], strlen(cg_w_names[i]) + 1);
    len += (Elf64_Word)strlen(cg_w_names[i]) + 1;
  }
  t->sh[CG_W_DATA] = cg_w_sect(at[CG_W_DATA], SHT_PROGBITS, SHF_ALLOC, sizeof *eh, (Elf64_Xword)blob, CG_WEIGHTS_ALIGN);
  t->sh[CG_W_STACK] = cg_w_sect(at[CG_W_STACK], SHT_PROGBITS, 0, tail, 0, 1);
  t->sh[CG_W_SYMTAB] = cg_w_sect(at[CG_W_SYMTAB], SHT_SYMTAB, 0, tail + offsetof(cg_w_tail, sym), sizeof t->sym, 8);
  t->sh[CG_W_SYMTAB].sh_link = CG_W_STRTAB, t->sh[CG_W_SYMTAB].sh_info = 1;   /* index of the first global */
  t->sh[CG_W_SYMTAB].sh_entsize = sizeof(Elf64_Sym);
  t->sh[CG_W_STRTAB] = cg_w_sect(at[CG_W_STRTAB], SHT_STRTAB, 0, tail + offsetof(cg_w_tail, str), sizeof t->str, 1);
  t->sh[CG_W_SHSTRTAB] = cg_w_sect(at[CG_W_SHSTRTAB], SHT_STRTAB, 0, tail + offsetof(cg_w_tail, shstr), len, 1);
  eh->e_type = ET_REL, eh->e_version = EV_CURRENT, eh->e_entry = 0, eh->e_phoff = 0, eh->e_phentsize = 0, eh->e_phnum = 0;
  eh->e_shoff = tail + offsetof(cg_w_tail, sh), eh->e_ehsize = sizeof *eh, eh->e_shentsize = sizeof(Elf64_Shdr);
  eh->e_shnum = CG_W_NSECT, eh->e_shstrndx = CG_W_SHSTRTAB;
}

/* Each tensor's data from where the descriptor points, then zeros up to the next offset. */
static int cg_w_blob(int fd, const rt_model_desc *d) {
  static const char zeros[CG_WEIGHTS_ALIGN];
  for (int i = 0; i < d->ntensors; i++) {
    int64_t n = cg_weights_bytes(&d->tensors[i]);
    if (n && (rt_file_write_fully(fd, d->tensors[i].data, (size_t)n) ||
              rt_file_write_fully(fd, zeros, (size_t)(cg_weights_round(n) - n))))
      return 1;
  }
  return 0;
}

int cg_write_weights(const rt_model_desc *d, const char *model_obj, const char *path, char *err, size_t n) {
  Elf64_Ehdr eh;
  cg_w_tail tail;
  if (cg_w_like(model_obj, &eh, err, n)) return 1;
  cg_w_build(&eh, &tail, cg_weights_layout(d, NULL));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return rt_errf(err, n, "cannot write '%s': %s", path, strerror(errno));
  int bad = rt_file_write_fully(fd, &eh, sizeof eh) || cg_w_blob(fd, d) || rt_file_write_fully(fd, &tail, sizeof tail);
  int e = errno;
  if (close(fd) && !bad) bad = 1, e = errno;
  return bad ? rt_errf(err, n, "cannot write '%s': %s", path, strerror(e ? e : EIO)) : 0;
}
