// Validates Kubernetes manifests against the Kubernetes API schemas shipped in the npm package
// kubernetes-models (JSON schemas generated from the Kubernetes OpenAPI spec, checked with ajv).
//   node validate.mjs FILE.yaml...   -> exit 0 if every document is valid, else 1 with reasons;
//   prints the parsed documents as one JSON array on stdout (for further checks by the tests).
// Every document needs apiVersion and kind of a built-in API type; others are refused.
// The schemas do not forbid unknown fields, so a second check does, as a server with strict
// field validation would: each document is written as a TypeScript object literal typed with
// the package's interface for its kind (IDeployment, ...) and type-checked by the TypeScript
// compiler, whose excess-property check refuses any field, at any depth, that the API type does
// not declare (a misspelled `readinesProbe`, a field in the wrong place).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { parseAllDocuments } from "yaml";

const HERE = dirname(fileURLToPath(import.meta.url));

// Returns one message per field the API types do not declare (or any other type error).
function unknownFields(typed) {
  if (!typed.length) return [];
  // Inside this folder, so that "kubernetes-models/..." resolves to our node_modules.
  const dir = mkdtempSync(join(HERE, ".strict-"));
  try {
    const lines = [];
    typed.forEach(({ doc, where }, i) => {
      const module = `kubernetes-models/${doc.apiVersion}/${doc.kind}`;
      lines.push(`import type { I${doc.kind} as T${i} } from ${JSON.stringify(module)};`);
      lines.push(`// ${where.replace(/[\r\n]/g, " ")}`);
      lines.push(`export const d${i}: T${i} = ${JSON.stringify(doc, null, 1)};`);
    });
    const file = join(dir, "manifests.ts");
    writeFileSync(file, lines.join("\n") + "\n");
    const program = ts.createProgram([file], {
      noEmit: true, strict: true, skipLibCheck: true, target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
    });
    return ts.getPreEmitDiagnostics(program).map((d) => {
      const text = ts.flattenDiagnosticMessageText(d.messageText, " ");
      if (!d.file || d.start === undefined) return text;
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      // The comment line above each literal names its document.
      const src = d.file.text.split("\n");
      let at = line;
      while (at > 0 && !src[at].startsWith("// ")) at--;
      return `${src[at].slice(3)}: ${text}`;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const docs = [];
const typed = [];
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
    typed.push({ doc, where });
  }
}
for (const message of unknownFields(typed)) {
  console.error(`strict fields: ${message}`);
  failed = true;
}
process.stdout.write(JSON.stringify(docs) + "\n");
process.exit(failed ? 1 : 0);
