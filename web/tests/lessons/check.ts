// The checks every lesson step's text must pass, whatever the lesson: every placeholder filled in every
// language, every claim true for the numbers (claims.ts), no number in prose over 3 significant digits, no
// negative number after an operator without parentheses.
import { CATALOGUES, LANGS, placeholders, template } from "../../src/lib/i18n";
import { plain, render, values, type Sentence, type Text, type Value } from "../../src/lib/lesson";
import { significantDigits } from "../../src/lib/lessonFormat";
import { CLAIMS, type ClaimContext } from "./claims";

/** The values of a sentence by placeholder name (numbers and strings given directly count as values; a
 *  sentence given as a value counts as one whose `raw` is its key, so that a check can tell which phrase it is, and
 *  its own values follow under "name.placeholder", in reading order: a list of values built of nested sentences
 *  reaches the check whole). */
function varsOf(s: Sentence, prefix = ""): Record<string, Value> {
  const out: Record<string, Value> = {};
  for (const [k, v] of Object.entries(s.vars ?? {})) {
    if (typeof v === "object" && !("key" in v)) out[prefix + k] = v;
    else if (typeof v === "object") {
      out[prefix + k] = { id: k, v: v.key, raw: v.key };
      Object.assign(out, varsOf(v, `${prefix}${k}.`));
    } else out[prefix + k] = { id: k, v: String(v), raw: v };
  }
  return out;
}

function sentences(text: Text): Sentence[] {
  const out: Sentence[] = [];
  const walk = (s: Sentence) => {
    out.push(s);
    for (const v of Object.values(s.vars ?? {})) if (typeof v === "object" && "key" in v) walk(v);
  };
  text.forEach(walk);
  return out;
}

/** What is wrong with one step's text, in words (empty when nothing is). */
export async function problems(text: Text, ctx: ClaimContext): Promise<string[]> {
  const out: string[] = [];
  for (const s of sentences(text)) {
    const need = placeholders(template("en", s.key));
    for (const lang of LANGS) {
      const have = placeholders(CATALOGUES[lang][s.key] ?? template("en", s.key));
      if (have.sort().join() !== [...need].sort().join()) out.push(`${s.key}: ${lang} has {${have}} where en has {${need}}`);
    }
    const missing = need.filter((p) => !(p in (s.vars ?? {})));
    if (missing.length) out.push(`${s.key}: no value for {${missing}}`);
    if (s.claim) {
      const check = CLAIMS[s.key];
      if (!check) out.push(`${s.key}: a claim with no check in web/tests/lessons/claims.*.ts`);
      else {
        const r = await check(varsOf(s), ctx);
        if (r !== true) out.push(`${s.key}: ${r}`);
      }
    }
  }
  for (const v of values(text)) {
    if (typeof v.raw === "string") continue; // a text (a source, an output, a name), not a number of the prose
    const d = significantDigits(v.v);
    if (d !== null && d > 3) out.push(`value ${v.id} = "${v.v}" has ${d} significant digits`);
  }
  for (const lang of LANGS) {
    const p = plain(render(lang, text));
    const bad = /[+−×·=] ?−\d/.exec(p);
    if (bad) out.push(`${lang}: a negative number after an operator without parentheses: "…${p.slice(Math.max(0, bad.index - 20), bad.index + 12)}…"`);
    if (/\{\w+\}/.test(p)) out.push(`${lang}: an unfilled placeholder in "${p}"`);
  }
  return out;
}

