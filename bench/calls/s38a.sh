#!/usr/bin/env bash
# session 38 call A: s37d (experiments 41c / 41d, carry .peer/exp/e41d = 8b81059 staged) with 200 s test limits,
# for a short device budget.
TEST_S=200 exec bash "$(dirname "$0")/s37d.sh"
