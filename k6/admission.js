// k6 load test: POST AdmissionReview Pods straight to a running gavel
// (direct to the webhook, no API server), alternating a compliant and a
// violating Pod, and check each verdict.
//
//   k6 run -e VUS=100 -e ITERATIONS=1000 -e TARGET=https://127.0.0.1:9443/validate k6/admission.js
//
// Environment: TARGET (URL), VUS, ITERATIONS, P99_MS (threshold on the
// 99th percentile, default 5), SUMMARY (path of the JSON summary to write);
// RATE and DURATION for a constant arrival rate instead of fixed iterations.
import http from 'k6/http';
import { check } from 'k6';
import { textSummary } from './summary.js';

const TARGET = __ENV.TARGET || 'https://127.0.0.1:9443/validate';
const VUS = parseInt(__ENV.VUS || '100');
const ITERATIONS = parseInt(__ENV.ITERATIONS || '1000');
const P99_MS = parseFloat(__ENV.P99_MS || '5');
const RATE = parseInt(__ENV.RATE || '0');

const reviews = [
  { body: open('../examples/reviews/pod-compliant.json'), allowed: true },
  { body: open('../examples/reviews/pod-violating.json'), allowed: false },
];

export const options = {
  insecureSkipTLSVerify: true,
  discardResponseBodies: false,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  scenarios: {
    // Kyverno's table: a fixed number of iterations, as fast as the VUs go.
    // With RATE set instead: that many requests per second for DURATION,
    // from up to VUS VUs, to see latency below saturation.
    admission: RATE
      ? {
        executor: 'constant-arrival-rate',
        rate: RATE,
        timeUnit: '1s',
        duration: __ENV.DURATION || '20s',
        preAllocatedVUs: VUS,
        maxVUs: VUS,
      }
      : {
        executor: 'shared-iterations',
        vus: VUS,
        iterations: ITERATIONS,
        maxDuration: '10m',
      },
  },
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate==0'],
    http_req_duration: [`p(99)<${P99_MS}`],
  },
};

const params = { headers: { 'Content-Type': 'application/json' } };

export default function () {
  const review = reviews[(__VU + __ITER) % reviews.length];
  const res = http.post(TARGET, review.body, params);
  check(res, {
    'status 200': (r) => r.status === 200,
    'verdict as expected': (r) => {
      try {
        return r.json('response.allowed') === review.allowed;
      } catch (e) {
        return false;
      }
    },
  });
}

export function handleSummary(data) {
  const shape = RATE ? `${RATE}/s from up to ${VUS} VUs` : `${VUS} VUs / ${ITERATIONS} iterations`;
  const out = { stdout: textSummary(data, shape) };
  if (__ENV.SUMMARY) {
    out[__ENV.SUMMARY] = JSON.stringify(data, null, 2);
  }
  return out;
}
