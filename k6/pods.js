// k6 load test through a real kube-apiserver: each iteration creates one Pod
// (POST /api/v1/namespaces/NS/pods), as Kyverno's load-testing scenarios do,
// so the API server calls the admission webhooks registered for Pods (or
// none, for the baseline). The Pods are compliant with the restricted Pod
// Security profile, so every create is admitted and stored, and kwok runs it
// on one of the fake nodes (nodeName set: the scheduler is not measured).
//
//   k6 run -e API=https://127.0.0.1:6443 -e TOKEN=... -e NAMESPACE=load \
//     -e VUS=100 -e ITERATIONS=1000 -e NODES=1000 -e ROUND=r1 k6/pods.js
//
// Environment: API, TOKEN (a bearer token allowed to create Pods), NAMESPACE,
// VUS, ITERATIONS, NODES (kwok-node-0 .. NODES-1), ROUND (prefix of the Pod
// names, unique per run), SUMMARY (path of the JSON summary to write).
import http from 'k6/http';
import { check } from 'k6';
import { textSummary } from './summary.js';

const API = __ENV.API;
const NAMESPACE = __ENV.NAMESPACE || 'load';
const VUS = parseInt(__ENV.VUS || '100');
const ITERATIONS = parseInt(__ENV.ITERATIONS || '1000');
const NODES = parseInt(__ENV.NODES || '1000');
const ROUND = __ENV.ROUND || 'r';

export const options = {
  // The API server's serving certificate is signed by the test cluster's CA,
  // which k6 cannot be given; everything is on loopback.
  insecureSkipTLSVerify: true,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  scenarios: {
    pods: { executor: 'shared-iterations', vus: VUS, iterations: ITERATIONS, maxDuration: '20m' },
  },
};

const params = {
  headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${__ENV.TOKEN}` },
  responseType: 'none',
};

function pod(name, node) {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'load', round: ROUND } },
    spec: {
      nodeName: `kwok-node-${node}`,
      tolerations: [{ key: 'kwok.x-k8s.io/node', operator: 'Exists', effect: 'NoSchedule' }],
      securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
      containers: [{
        name: 'app',
        image: 'registry.example.com/app:1.0',
        securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
      }],
    },
  });
}

export default function () {
  const n = (__VU - 1) * 1000000 + __ITER;
  const res = http.post(`${API}/api/v1/namespaces/${NAMESPACE}/pods`, pod(`${ROUND}-${n}`, n % NODES), params);
  check(res, { 'created (201)': (r) => r.status === 201 });
}

export function handleSummary(data) {
  const out = { stdout: textSummary(data, `${VUS} VUs / ${ITERATIONS} Pods`) };
  if (__ENV.SUMMARY) {
    out[__ENV.SUMMARY] = JSON.stringify(data, null, 2);
  }
  return out;
}
