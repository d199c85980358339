-- Every worked example of the Perl reference, value by value.
local backoff = require "backoff"
local helpers = require "spec.helpers"
local cases = require "spec.data.perl_examples"

local function check_value(case, i, expected, got, what)
  assert(helpers.close(expected, got),
    ("%s: op %d: %s expected %.17g, got %s"):format(case.name, i, what,
      expected, tostring(got)))
end

describe("the Perl reference's worked examples", function()
  for _, case in ipairs(cases) do
    it(case.name, function()
      local b = backoff.new(case.strategy, helpers.options(case))
      if case.initial_timeout then
        check_value(case, 0, case.initial_timeout, b:timeout(), "timeout()")
      end
      for i, op in ipairs(case.ops) do
        local d, t = b[op[1]](b, op[2])
        local want = case.expect[i]
        local want_delay = type(want) == "table" and want[1] or want
        if want_delay == -1 then
          assert.is_nil(d, case.name .. ": op " .. i .. " should give up")
          assert.is_string(t)
          assert.truthy(t == "max_attempts" or t == "max_actual_duration")
        else
          check_value(case, i, want_delay, d, "delay")
          assert.truthy(helpers.is_delay(d))
          if type(want) == "table" then
            check_value(case, i, want[2], t, "timeout")
          else
            assert.is_nil(t, "no timeout expected")
          end
        end
        if case.expect_accessors then
          local acc = case.expect_accessors[i]
          check_value(case, i, acc[1], b:delay(), "delay()")
          check_value(case, i, acc[2], b:timeout(), "timeout()")
        end
      end
    end)
  end
end)
