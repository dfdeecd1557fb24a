/** build/localeMeta.ts: every catalogue's "meta.*" strings, by language code. */
declare module "virtual:te-locale-meta" {
  const meta: Record<string, Record<string, string>>;
  export default meta;
}
