-- wrk script for flashgate: POST /v1/claims, one distinct user and request id per
-- request, so the gateway does a real claim (or answers sold out) for each, as it does
-- for bench's own load generator. Used by `bench run --external` and by
-- bench/external/compare.sh; by hand:
--
--   wrk -t2 -c100 -d8s -s bench/external/claims.lua http://127.0.0.1:8080/v1/claims -- <tag> <sku[,sku...]> [tokens-file threads]
--
-- The gateways verify a bearer token per claim: `tokens-file` holds one `user token` line
-- per user (minted beforehand, as bench does with `--token-secret-file`), and request n of
-- thread t uses line n·threads + t (wrapping around: past the end, users repeat).
-- At the end it prints one line `FGJSON {...}` (requests, duration, latency percentiles in
-- µs, answers by HTTP status, socket errors, wrk's own CPU seconds) for bench to read.

local threads = {}
local next_id = 0

function setup(thread)
   thread:set("tid", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

function init(args)
   tag = args[1] or ("w" .. os.time() .. "-")
   skus = {}
   for s in string.gmatch(args[2] or "1", "[^,]+") do
      table.insert(skus, s)
   end
   n = 0
   statuses = {}
   users, tokens = {}, {}
   if args[3] then
      local f = assert(io.open(args[3]))
      for line in f:lines() do
         local u, t = line:match("^(%S+) (.+)$")
         if u then
            table.insert(users, u)
            table.insert(tokens, t)
         end
      end
      f:close()
   end
   nthreads = tonumber(args[4] or "1")
   headers = { ["Content-Type"] = "application/json" }
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   n = n + 1
   local sku = skus[(n % #skus) + 1]
   local id = tid .. "-" .. n
   local user = tag .. "u" .. id
   if #users > 0 then
      local i = (((n - 1) * nthreads + tid) % #users) + 1
      user = users[i]
      headers["Authorization"] = tokens[i]
   end
   local body = '{"sku":' .. sku .. ',"user":"' .. user ..
      '","qty":1,"request_id":"' .. tag .. 'r' .. id .. '"}'
   return wrk.format(nil, nil, headers, body)
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
   local by = {}
   for _, t in ipairs(threads) do
      for s, c in pairs(t:get("statuses") or {}) do
         by[s] = (by[s] or 0) + c
      end
   end
   local parts = {}
   for s, c in pairs(by) do
      table.insert(parts, '"' .. s .. '":' .. c)
   end
   local e = summary.errors
   io.write(string.format(
      'FGJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,' ..
      '"socket_errors":%d,"statuses":{%s},"cpu_s":%.3f}\n',
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
      latency.max, e.connect + e.read + e.write + e.timeout, table.concat(parts, ","),
      os.clock()))
end
