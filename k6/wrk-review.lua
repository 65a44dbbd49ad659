-- wrk script: POST AdmissionReviews, alternating between the files named in
-- the REVIEWS environment variable (colon separated).
local bodies = {}
for path in string.gmatch(os.getenv("REVIEWS") or "", "[^:]+") do
  local f = assert(io.open(path, "rb"))
  bodies[#bodies + 1] = f:read("*a")
  f:close()
end
assert(#bodies > 0, "set REVIEWS to one or more AdmissionReview files")

local requests = {}
function init(args)
  for i, body in ipairs(bodies) do
    requests[i] = wrk.format("POST", nil, { ["Content-Type"] = "application/json" }, body)
  end
end

local n = 0
function request()
  n = n + 1
  return requests[(n % #requests) + 1]
end

-- No response() hook: with one defined, wrk hands every response's headers
-- and body to Lua, a per-byte cost that falls on the load generator and
-- grows with gavel's denials (6.6 KB for the violating Pod) but not with the
-- baseline's answer.
-- wrk counts statuses above 399 itself.
function done(summary, latency, requests)
  io.write(string.format("non_200 %d\n", summary.errors.status))
end
