// The one-line text summary the k6 scripts print (k6's own needs a remote
// module, and nothing may be fetched at run time).
export function textSummary(data, shape) {
  const d = data.metrics.http_req_duration.values;
  const checks = data.metrics.checks.values;
  const fmt = (v) => `${v.toFixed(2)}ms`;
  return `${shape}: ` +
    `avg ${fmt(d.avg)} med ${fmt(d.med)} p(95) ${fmt(d['p(95)'])} p(99) ${fmt(d['p(99)'])} max ${fmt(d.max)}, ` +
    `checks ${(checks.rate * 100).toFixed(2)}%, ` +
    `${data.metrics.http_reqs.values.rate.toFixed(0)} req/s\n`;
}
