// Validates Kubernetes manifests against the Kubernetes API schemas shipped in the npm package
// kubernetes-models (JSON schemas generated from the Kubernetes OpenAPI spec, checked with ajv).
//   node validate.mjs FILE.yaml...   -> exit 0 if every document is valid, else 1 with reasons;
//   prints the parsed documents as one JSON array on stdout (for further checks by the tests).
// Every document needs apiVersion and kind of a built-in API type; others are refused.
// Known limit: these schemas do not forbid unknown fields (a misspelled field passes here; a
// server with strict field validation would refuse it).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const docs = [];
let failed = false;
for (const file of process.argv.slice(2)) {
  for (const parsed of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (parsed.errors.length) {
      console.error(`${file}: YAML: ${parsed.errors[0].message}`);
      failed = true;
      continue;
    }
    const doc = parsed.toJS();
    if (doc === null) continue;
    const where = `${file}: ${doc.kind ?? "?"} ${doc.metadata?.name ?? "?"}`;
    if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") {
      console.error(`${where}: no apiVersion/kind`);
      failed = true;
      continue;
    }
    // "apps/v1" -> kubernetes-models/apps/v1 ; "v1" -> kubernetes-models/v1
    let models;
    try {
      models = await import(`kubernetes-models/${doc.apiVersion}`);
    } catch {
      console.error(`${where}: unknown apiVersion ${doc.apiVersion}`);
      failed = true;
      continue;
    }
    const Model = models[doc.kind];
    if (typeof Model !== "function") {
      console.error(`${where}: unknown kind ${doc.kind} in ${doc.apiVersion}`);
      failed = true;
      continue;
    }
    try {
      new Model(doc).validate();
    } catch (e) {
      console.error(`${where}: ${e.message}`);
      failed = true;
    }
    docs.push(doc);
  }
}
process.stdout.write(JSON.stringify(docs) + "\n");
process.exit(failed ? 1 : 0);
