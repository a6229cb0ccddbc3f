#ifndef GRANARY_TEST_SETUP_H
#define GRANARY_TEST_SETUP_H
// 1: the test setup (ProcessSetup's installs, from a constructor) is linked into this binary.
int granary_test_setup_linked(void);
#endif
