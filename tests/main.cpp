// The Catch2 runner for the CPU tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
