-- wrk script: POST the body in $BODY_FILE with $AUTH_HEADER; print one WRKJSON line at the end.
local file = assert(io.open(assert(os.getenv("BODY_FILE"), "set BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("AUTH_HEADER")
if auth and auth ~= "" then
  wrk.headers["Authorization"] = auth
  wrk.headers["x-api-key"] = string.gsub(auth, "^Bearer ", "")
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"errors":%d,"status_errors":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect + e.read + e.write + e.status + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
