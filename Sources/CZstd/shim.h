#ifndef GRANARY_CZSTD_SHIM_H
#define GRANARY_CZSTD_SHIM_H
// libzstd, used directly for writing .tar.zst: libarchive 3.6's zstd filter exposes neither the
// job size (which sets the multithreaded compressor's memory) nor frame checksums.
#include <zstd.h>
#endif
