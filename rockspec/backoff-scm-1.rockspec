rockspec_format = "3.0"
package = "backoff"
version = "scm-1"
source = {
  url = "git+https://example.invalid/backoff.git",
  branch = "main",
}
description = {
  summary = "Retry backoff strategies: a C core with a Lua face",
  detailed = [[
Constant, linear, exponential, fibonacci, LILD, LIMD, MILD, MIMD,
decorrelated and retry_timeouts backoff with none/proportional/full/equal
jitter, limits and per-attempt timeouts; a yield-safe retry runner for
OpenResty and coroutines; the backoff-delays command-line tool.]],
  license = "MIT",
}
dependencies = {
  "lua >= 5.1, < 5.5",
}
test_dependencies = {
  "busted",
}
test = {
  type = "busted",
}
build = {
  type = "builtin",
  modules = {
    backoff = "lua/backoff.lua",
    ["backoff.cli"] = "lua/backoff/cli.lua",
    ["backoff.ffi"] = "lua/backoff/ffi.lua",
    ["backoff.retry_after"] = "lua/backoff/retry_after.lua",
    ["backoff.budget"] = "lua/backoff/budget.lua",
    ["backoff.balancer"] = "lua/backoff/balancer.lua",
    ["backoff.metrics"] = "lua/backoff/metrics.lua",
    ["backoff.http"] = "lua/backoff/http.lua",
    ["backoff.http.hint"] = "lua/backoff/http/hint.lua",
    ["backoff.core"] = {
      -- the Makefile's CORE_SRC and BINDING_SRC
      sources = { "csrc/backoff.c", "csrc/backoff_options.c",
                  "csrc/backoff_budget.c", "csrc/lbackoff.c",
                  "csrc/lbackoff_options.c", "csrc/lbackoff_env.c",
                  "csrc/lbackoff_msg.c", "csrc/lbackoff_ffi.c",
                  "csrc/lbudget.c" },
      incdirs = { "csrc" },
      libraries = { "m" },
    },
  },
  install = {
    bin = { ["backoff-delays"] = "bin/backoff-delays" },
  },
}
