// Validates kev serve's OpenAPI document and real responses against it.
//   node validate.mjs DOC.json [EXCHANGES.json]
// 1. DOC.json is validated as an OpenAPI 3.x document by @apidevtools/swagger-parser (the
//    OpenAPI JSON schema plus its own checks: $refs resolve, operationIds unique, ...).
// 2. Each exchange {"method","path","status","headers":{lowercase: value},"body": text} is
//    looked up in the document: the operation's response for that status (no "default" is
//    accepted: every status must be listed), or components.responses.NotFound for a path the
//    document does not list, or components.responses.MethodNotAllowed for a listed path asked
//    with another method. Its Content-Type must be one of the response's media types, the body
//    must validate against that media type's schema (ajv, JSON Schema 2020-12, as OpenAPI 3.1
//    uses), and every header the response declares required must be present and valid.
// Prints one JSON object {"document": [errors], "exchanges": [[errors] per exchange]} on stdout;
// exit 0 when there is no error, else 1.
import { readFileSync } from "node:fs";
import SwaggerParser from "@apidevtools/swagger-parser";
import Ajv2020 from "ajv/dist/2020.js";

const [docFile, exchangesFile] = process.argv.slice(2);
const out = { document: [], exchanges: [] };
let api;
try {
  // validate() resolves and dereferences every $ref in the document it returns.
  api = await SwaggerParser.validate(JSON.parse(readFileSync(docFile, "utf8")));
} catch (e) {
  out.document.push(String(e.message ?? e));
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
const compiled = new Map();
function check(schema, value) {
  let validate = compiled.get(schema);
  if (!validate) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  return validate(value) ? [] : validate.errors.map((e) => `${e.instancePath || "/"} ${e.message}`);
}

function mediaType(value) {
  return (value ?? "").split(";")[0].trim().toLowerCase();
}

function checkExchange(x) {
  const errors = [];
  const item = api.paths[x.path];
  let response;
  if (!item) {
    response = api.components.responses.NotFound;
    if (x.status !== 404) errors.push(`${x.path} is not in the document but was answered ${x.status}`);
  } else if (!item[x.method.toLowerCase()]) {
    response = api.components.responses.MethodNotAllowed;
    if (x.status !== 405)
      errors.push(`${x.method} ${x.path} is not in the document but was answered ${x.status}`);
  } else {
    response = item[x.method.toLowerCase()].responses[String(x.status)];
    if (!response) {
      errors.push(`${x.method} ${x.path}: status ${x.status} is not documented`);
      return errors;
    }
  }
  const contentType = x.headers["content-type"];
  const content = response.content ?? {};
  const key =
    Object.keys(content).find((k) => k.toLowerCase() === (contentType ?? "").toLowerCase()) ??
    Object.keys(content).find((k) => mediaType(k) === mediaType(contentType));
  if (Object.keys(content).length && key === undefined) {
    errors.push(`content-type ${contentType} is not one of ${Object.keys(content).join(", ")}`);
  } else if (key !== undefined) {
    let body = x.body;
    if (mediaType(key) === "application/json") {
      try {
        body = JSON.parse(x.body);
      } catch (e) {
        errors.push(`the body is not JSON: ${e.message}`);
        return errors;
      }
    }
    const schema = content[key].schema;
    if (schema) errors.push(...check(schema, body).map((e) => `body ${e}`));
  }
  for (const [name, header] of Object.entries(response.headers ?? {})) {
    const value = x.headers[name.toLowerCase()];
    if (value === undefined) {
      if (header.required) errors.push(`header ${name} is missing`);
      continue;
    }
    if (header.schema) errors.push(...check(header.schema, value).map((e) => `header ${name} ${e}`));
  }
  return errors;
}

if (api && exchangesFile) {
  for (const x of JSON.parse(readFileSync(exchangesFile, "utf8"))) {
    out.exchanges.push(checkExchange(x));
  }
}
console.log(JSON.stringify(out));
process.exit(out.document.length || out.exchanges.some((e) => e.length) ? 1 : 0);
