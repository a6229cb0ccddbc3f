// The test binaries' setup: GranaryKit's process-wide installs in SQLite, made once before any
// test runs, as the granary executable makes them at start (ProcessSetup.install(): the
// allocator wrapper first, since installing the VFS's system calls initialises SQLite). A test
// binary has no main of its own to call them from, hence a constructor here, in the test
// targets alone: the library itself installs nothing at load time.
#include "granary_test_setup.h"
#include "granary_beneath.h"
#include "granary_limits.h"

__attribute__((constructor)) static void granary_test_setup(void) {
    granary_limits_install();
    granary_beneath_install();
}

int granary_test_setup_linked(void) { return 1; }
