#ifndef GRANARY_CARCHIVE_SHIM_H
#define GRANARY_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#endif
