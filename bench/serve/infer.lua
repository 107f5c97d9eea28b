-- wrk script for KServe v2 binary-tensor inference requests (bench/serve/bench_serve.py
-- writes the body file). Usage:
--   wrk -t2 -c16 -d5s -s bench/serve/infer.lua http://127.0.0.1:PORT/v2/models/NAME/infer \
--       -- BODY_FILE JSON_HEADER_LENGTH
-- Prints one JSON line at the end: requests/s, latency percentiles (ms), errors.
local req

function init(args)
   local f = assert(io.open(args[1], "rb"))
   local body = f:read("*a")
   f:close()
   req = wrk.format("POST", nil, {
      ["Content-Type"] = "application/octet-stream",
      ["Inference-Header-Content-Length"] = args[2],
   }, body)
end

function request()
   return req
end

function done(summary, latency, requests)
   local secs = summary.duration / 1e6
   local e = summary.errors
   local non2xx = e.status
   io.write(string.format(
      '{"qps": %.2f, "p50_ms": %.4f, "p90_ms": %.4f, "p99_ms": %.4f, "mean_ms": %.4f, ' ..
      '"requests": %d, "errors": %d}\n',
      (summary.requests - non2xx) / secs, latency:percentile(50) / 1e3, latency:percentile(90) / 1e3,
      latency:percentile(99) / 1e3, latency.mean / 1e3, summary.requests,
      non2xx + e.connect + e.read + e.write + e.timeout))
end
