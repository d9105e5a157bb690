-- chatgql benchmark: GraphQL POSTs for wrk (see bench/README.md).
--
--   wrk -t2 -c16 -d20s -s bench/wrk/gql.lua http://127.0.0.1:PORT/graphql -- CONFIG.lua
--
-- CONFIG.lua (written by bench/httpload.py) returns a table:
--   mode      send_spread | send_pair | send_hot | read | delivered | inbox
--   tokens    path of a file with one bearer token per line (token i = user i of the scenario)
--   query     the GraphQL document, already JSON-escaped (or its sha256, with field = "documentId")
--   field     the body's key for it: "query" (the default) or "documentId" (a persisted document)
--   threads   wrk's -t (read: thread t owns the conversations i = t (mod threads))
--   seed      random seed (each thread adds its own number)
--   hot_cid, read_cid0, read_base, inbox_page
-- Every response is checked: non-200, GraphQL errors, and (send) duplicates or
-- (read) watermarks that did not advance are counted; done() prints one
-- line "WRKJSON {...}" with the totals and latency percentiles (microseconds).

local counter = 0
local threads = {}

function setup(thread)
   counter = counter + 1
   thread:set("tid", counter)
   table.insert(threads, thread)
end

function init(args)
   cfg = dofile(args[1])
   mode = cfg.mode
   tokens = {}
   for line in io.lines(cfg.tokens) do
      if #line > 0 then tokens[#tokens + 1] = line end
   end
   ntok = #tokens
   math.randomseed(cfg.seed + tid * 7919)
   for _ = 1, 10 do math.random() end
   seqno = 0
   ok, bad_status, gql_errors, duplicates, not_advanced = 0, 0, 0, 0, 0
   first_error = ""
   per_thread = math.floor(ntok / cfg.threads)
   headers = { ["Content-Type"] = "application/json" }
   head = '{"' .. (cfg.field or "query") .. '":"' .. cfg.query .. '"'
   if mode == "inbox" then
      headers["Authorization"] = "Bearer " .. tokens[1]
      inbox_req = wrk.format("POST", nil, headers,
         head .. ',"variables":{"n":' .. cfg.inbox_page .. '}}')
   end
end

local function r16() return math.random(0, 65535) end

local function uuid4()
   return string.format("%04x%04x-%04x-4%03x-%04x-%04x%04x%04x",
      r16(), r16(), r16(), math.random(0, 4095), math.random(32768, 49151), r16(), r16(), r16())
end

function request()
   if mode == "inbox" then
      return inbox_req
   end
   local i, cid, vars
   if mode == "send_spread" then
      i = math.random(1, ntok)
      vars = '{"c":"' .. i .. '","m":"' .. uuid4() .. '","b":"hello"}'
   elseif mode == "send_pair" then
      -- either member of conversation c (tokens c and c + half): the other member's send after
      -- one's own also marks it read
      local half = math.floor(ntok / 2)
      local c = math.random(1, half)
      i = c + half * math.random(0, 1)
      vars = '{"c":"' .. c .. '","m":"' .. uuid4() .. '","b":"hello"}'
   elseif mode == "send_hot" then
      i = math.random(1, ntok)
      vars = '{"c":"' .. cfg.hot_cid .. '","m":"' .. uuid4() .. '","b":"hello"}'
   else -- read, delivered
      i = tid + cfg.threads * math.random(0, per_thread - 1)
      seqno = seqno + 1
      vars = '{"c":"' .. (cfg.read_cid0 + i) .. '","s":' .. string.format("%d", cfg.read_base + seqno) .. '}'
   end
   headers["Authorization"] = "Bearer " .. tokens[i]
   return wrk.format("POST", nil, headers, head .. ',"variables":' .. vars .. '}')
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
   if mode == "read" or mode == "delivered" then
      if not string.find(body, '"advanced":%s*true') then not_advanced = not_advanced + 1 end
   elseif mode ~= "inbox" then
      if string.find(body, '"duplicate":%s*true') then duplicates = duplicates + 1 end
   end
end

local function esc(s)
   return (string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end))
end

function done(summary, latency, requests)
   local t = { ok = 0, bad_status = 0, gql_errors = 0, duplicates = 0, not_advanced = 0 }
   local err = ""
   for _, thread in ipairs(threads) do
      for k, _ in pairs(t) do t[k] = t[k] + (thread:get(k) or 0) end
      local e = thread:get("first_error")
      if err == "" and e and e ~= "" then err = e end
   end
   io.write(string.format(
      'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,' ..
      '"write_errors":%d,"status_errors":%d,"timeouts":%d,"ok":%d,"bad_status":%d,"gql_errors":%d,' ..
      '"duplicates":%d,"not_advanced":%d,"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,' ..
      '"lat_p99_us":%d,"lat_max_us":%d,"first_error":"%s"}\n',
      summary.requests, summary.duration, summary.bytes, summary.errors.connect, summary.errors.read,
      summary.errors.write, summary.errors.status, summary.errors.timeout, t.ok, t.bad_status, t.gql_errors,
      t.duplicates, t.not_advanced, latency.mean, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max, esc(err)))
end
