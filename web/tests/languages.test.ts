// The language menu is fed by the catalogues: each file of src/locales/ is a language, named by its meta.name;
// a new file (here a French one, with two keys) is a third language whose missing keys fall back to English,
// chosen by ?lang= or the browser's languages, without a change to the code. And the server's errors are
// worded from the catalogue by their code and params, in the learner's language.
import { describe, expect, it } from "vitest";
import en from "../src/locales/en.json";
import zh from "../src/locales/zh.json";
import { ApiError } from "../src/lib/client";
import { asError, errorText, overLong } from "../src/lib/errorText";
import type { ErrorCode } from "../src/lib/generated/api";
import { ERROR_PARAMS } from "../src/lib/generated/errors";
import { CATALOGUES, isKey, LANGS, Languages, placeholders, template } from "../src/lib/i18n";
import { needsCjkFont } from "../src/lib/cjkFont";

const files = import.meta.glob<Record<string, string>>("../src/locales/*.json", { eager: true, import: "default" });
const fr = { "meta.name": "Français", "meta.htmlLang": "fr", "ui.error": "Problème" };

describe("the catalogue list", () => {
  it("is the files of src/locales, named by their meta.name", () => {
    expect(LANGS).toEqual(Object.keys(files).map((p) => p.replace(/^.*\/([^/]+)\.json$/, "$1"))
      .sort((a, b) => (a === "en" ? -1 : b === "en" ? 1 : a.localeCompare(b))));
    expect(LANGS.map((l) => template(l, "meta.name"))).toEqual(expect.arrayContaining(["English", "中文"]));
  });

  it("gains a language with a new file, English where it has no string", () => {
    const langs = new Languages({ ...files, "../src/locales/fr.json": fr });
    expect(langs.langs).toEqual(["en", "fr", "zh"]);
    expect(langs.template("fr", "meta.name")).toBe("Français");
    expect(langs.template("fr", "ui.error")).toBe("Problème");
    expect(langs.template("fr", "ui.title")).toBe(en["ui.title"]); // not in fr.json: English
    expect(langs.template("fr", "meta.sentenceGap")).toBe(" ");
    expect(langs.template("fr", "meta.font")).toBe(""); // no CJK font for it
    expect(langs.best(["fr-CA", "en"])).toBe("fr");
    expect(langs.best(["de-DE", "fr"])).toBe("fr");
    expect(langs.best(["de-DE"])).toBe("en");
  });

  it("picks the best catalogue for ?lang= and the browser's languages", () => {
    const langs = new Languages(files);
    expect(langs.best(["zh"])).toBe("zh");
    expect(langs.best(["zh-TW", "en"])).toBe("zh");
    expect(langs.best(["zh-CN"])).toBe("zh"); // meta.htmlLang
    expect(langs.best(["en", "zh"])).toBe("en");
    expect(langs.best(["", "ZH_cn"])).toBe("zh");
    expect(langs.best([])).toBe("en");
    // among the languages a page offers (an offline snapshot may offer one)
    expect(langs.best(["zh-CN"], ["en"])).toBe("en");
    expect(langs.best(["en-US"], ["zh"])).toBe("zh");
  });

  it("loads a catalogue only when asked, its menu strings there before, and again after a failure", async () => {
    const zhMeta = Object.fromEntries(Object.entries(zh).filter(([k]) => k.startsWith("meta.")));
    let calls = 0;
    let fail = true;
    const load = async () => {
      calls += 1;
      if (fail) throw new Error("the server is gone");
      return zh;
    };
    const langs = new Languages({ "../src/locales/en.json": en }, { "../src/locales/zh.json": load }, { zh: zhMeta });
    expect(langs.langs).toEqual(["en", "zh"]);
    expect(calls).toBe(0);
    expect(langs.template("zh", "meta.name")).toBe("中文"); // the menu and the choice of language need no load
    expect(langs.best(["zh-CN"])).toBe("zh");
    expect(langs.template("zh", "ui.title")).toBe(en["ui.title"]); // English until its catalogue is in
    await expect(langs.load("zh")).rejects.toThrow("the server is gone");
    expect(langs.template("zh", "ui.title")).toBe(en["ui.title"]);
    fail = false;
    await Promise.all([langs.load("zh"), langs.load("zh")]); // tried again, once for both
    expect(calls).toBe(2);
    expect(langs.template("zh", "ui.title")).toBe(zh["ui.title"]);
    expect(langs.catalogues.zh).toBe(zh);
    await langs.load("zh");
    await langs.load("en"); // loaded with the page
    await langs.load("fr"); // no such catalogue: nothing to load, English's strings
    expect(calls).toBe(2);
  });

  it("asks for the CJK font only where the catalogue says so", () => {
    expect(needsCjkFont("zh")).toBe(true);
    expect(needsCjkFont("en")).toBe(false);
    expect(needsCjkFont("fr")).toBe(false); // a catalogue that does not exist, or says nothing: English's
    expect(CATALOGUES.zh["meta.htmlLang"]).toBe("zh-CN");
  });
});

const detail = "the English sentence of the server";
const err = (code: string, params: Record<string, string | number> = {}) =>
  new ApiError(422, detail, code as ErrorCode, params);

describe("errors", () => {
  it("every code the server sends has its sentence, naming only the code's params", () => {
    for (const [code, params] of Object.entries(ERROR_PARAMS)) {
      const key = `error.${code}`;
      expect(isKey(key), key).toBe(true);
      for (const lang of LANGS) {
        const used = placeholders(template(lang, key as keyof typeof en));
        expect(used.filter((p) => p !== "detail" && !params.includes(p)), `${lang} ${key}`).toEqual([]);
      }
    }
  });

  it("are worded in the learner's language with the params", () => {
    const e = err("text_too_long", { tokens: 1300, limit: 1024, context: 1024 });
    expect(errorText("en", e)).toBe("The text is 1300 tokens long, more than the 1024 that fit: shorten it, or keep "
      + "only its last 1024 tokens.");
    const inZh = errorText("zh", e);
    expect(inZh).toBe(zh["error.text_too_long"].replace("{tokens}", "1300").replaceAll("{limit}", "1024"));
    expect(inZh).not.toContain("text");
    expect(errorText("zh", err("model_unknown", { model: "gpt-9", offered: "gpt2, explainer-small" })))
      .toBe("这台服务器没有名为 gpt-9 的模型，可用的模型：gpt2, explainer-small。");
  });

  it("word a param whose value the catalogue knows", () => {
    const e = err("s2s_out_of_vocabulary", { what: "input", level: "char", pieces: "'H', '!'" });
    expect(errorText("en", e)).toBe("The input contains characters outside this task's vocabulary: 'H', '!'");
    expect(errorText("zh", e)).toBe("输入中有这个任务词表之外的字符：'H', '!'");
  });

  it("fall back to the server's detail for a code the catalogue does not know, and say what other errors say", () => {
    expect(errorText("zh", err("a_code_from_a_newer_server", { x: 1 }))).toBe(detail);
    expect(errorText("zh", new ApiError(500, "500 Internal Server Error"))).toBe("500 Internal Server Error");
    expect(errorText("zh", new TypeError("Failed to fetch"))).toBe("Failed to fetch");
    expect(errorText("zh", asError("plain"))).toBe("plain");
    expect(errorText("en", err("input_invalid"))).toBe(detail); // the generic codes show the detail
    expect(errorText("zh", err("input_invalid"))).toContain(detail);
  });

  it("offer to keep the tokens that fit of an over-long text", () => {
    expect(overLong(err("text_too_long", { tokens: 200, limit: 128, context: 1024 }))).toEqual({ fit: 128 });
    expect(overLong(err("text_too_long", {}))).toEqual({ fit: null });
    expect(overLong(err("text_empty"))).toBeNull();
    expect(overLong(new Error("ask for truncation to keep the last 5 tokens"))).toBeNull(); // no English parsed
  });
});
