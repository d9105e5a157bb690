-- chatgql read-storm benchmark: markRead from many devices, for wrk (bench/readstorm.py).
--
--   wrk -t2 -c5000 -d12s -s bench/wrk/readstorm.lua http://127.0.0.1:PORT/graphql -- CONFIG.lua
--
-- CONFIG.lua (written by bench/readstorm.py) returns a table:
--   devices        path of a file, one device a line: "<token> <cid> <cid> ..." (the user's conversations)
--   query          the markRead document, already JSON-escaped
--   threads, seed  wrk's -t, and a random seed
--   base, lag      seq = base + a count that rises with every request - random(0, lag): most calls
--                  advance the watermark, some (late devices) do not
--   mean_delay_ms  0: closed loop (each connection sends as soon as it is answered); > 0: each
--                  connection waits an exponential time of this mean before every request, so the
--                  connections together send a Poisson stream of connections / mean_delay requests/s
-- Every response is checked (non-200, GraphQL errors, advanced); done() prints one line
-- "WRKJSON {...}" with the totals and latency percentiles (microseconds).

local counter = 0
local threads = {}

function setup(thread)
   counter = counter + 1
   thread:set("tid", counter)
   table.insert(threads, thread)
end

function init(args)
   cfg = dofile(args[1])
   devices = {}
   for line in io.lines(cfg.devices) do
      local fields = {}
      for f in string.gmatch(line, "%S+") do fields[#fields + 1] = f end
      if #fields > 1 then devices[#devices + 1] = fields end
   end
   math.randomseed(cfg.seed + tid * 7919)
   for _ = 1, 10 do math.random() end
   n = 0
   ok, bad_status, gql_errors, advanced = 0, 0, 0, 0
   first_error = ""
end

function delay()
   if cfg.mean_delay_ms <= 0 then return 0 end
   return math.floor(-cfg.mean_delay_ms * math.log(1 - math.random()))
end

function request()
   local d = devices[math.random(1, #devices)]
   n = n + 1
   local cid = d[math.random(2, #d)]
   local seq = cfg.base + n * cfg.threads + tid - math.random(0, cfg.lag)
   local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. d[1] }
   local vars = '{"c":"' .. cid .. '","s":' .. string.format("%d", seq) .. '}'
   return wrk.format("POST", nil, headers, '{"query":"' .. cfg.query .. '","variables":' .. vars .. '}')
end

function response(status, headers, body)
   if status ~= 200 then
      bad_status = bad_status + 1
      if first_error == "" then first_error = "HTTP " .. status .. " " .. string.sub(body or "", 1, 200) end
      return
   end
   if string.find(body, '"errors"', 1, true) then
      gql_errors = gql_errors + 1
      if first_error == "" then first_error = string.sub(body, 1, 300) end
      return
   end
   ok = ok + 1
   if string.find(body, '"advanced":%s*true') then advanced = advanced + 1 end
end

local function esc(s)
   return (string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end))
end

function done(summary, latency, requests)
   local t = { ok = 0, bad_status = 0, gql_errors = 0, advanced = 0 }
   local err = ""
   for _, thread in ipairs(threads) do
      for k, _ in pairs(t) do t[k] = t[k] + (thread:get(k) or 0) end
      local e = thread:get("first_error")
      if err == "" and e and e ~= "" then err = e end
   end
   io.write(string.format(
      'WRKJSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
      '"timeouts":%d,"ok":%d,"bad_status":%d,"gql_errors":%d,"advanced":%d,"lat_mean_us":%.1f,' ..
      '"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d,"first_error":"%s"}\n',
      summary.requests, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.write,
      summary.errors.timeout, t.ok, t.bad_status, t.gql_errors, t.advanced, latency.mean,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, esc(err)))
end
