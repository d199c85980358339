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
    ["backoff.retry_after"] = "lua/backoff/retry_after.lua",
    ["backoff.core"] = {
      sources = { "csrc/backoff.c", "csrc/lbackoff.c",
                  "csrc/backoff_budget.c", "csrc/lbudget.c" },
      incdirs = { "csrc" },
      libraries = { "m" },
    },
  },
  install = {
    bin = { ["backoff-delays"] = "bin/backoff-delays" },
  },
}
