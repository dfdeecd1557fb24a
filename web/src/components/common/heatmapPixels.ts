import type { ColorFn } from "../../lib/color";

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
// a pixel's bytes through the same clamped conversion as ImageData's (a colour need not be whole numbers)
const pixel = new Uint8ClampedArray(4);
const pixel32 = new Uint32Array(pixel.buffer);

/** Writes `color(values[i])` as the opaque RGBA pixel i of `px` (an ImageData's bytes), for i < n.

    The same pixels as calling `color` once per value and writing its bytes one by one, at less cost on a long text's
    pattern: `color` is a pure function of the value (lib/color's scales), so a value equal to the one before it (the
    half million zeros above a causal pattern's diagonal at 1,000 tokens come in one run per row) takes the colour
    computed for that one, and each pixel is one 32-bit write. */
export function paintCells(values: ArrayLike<number>, color: ColorFn, px: Uint8ClampedArray, n: number): void {
  if (!LITTLE_ENDIAN || px.byteOffset % 4 !== 0) {
    for (let i = 0; i < n; i++) {
      const [r, g, b] = color(values[i]);
      px[4 * i] = r;
      px[4 * i + 1] = g;
      px[4 * i + 2] = b;
      px[4 * i + 3] = 255;
    }
    return;
  }
  const out = new Uint32Array(px.buffer, px.byteOffset, n);
  let last = NaN, rgba = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    // the same value as the one before (NaN never is; 0 and -0 are told apart: a colour function may tell them)
    if (v !== last || (v === 0 && !Object.is(v, last))) {
      const rgb = color(v); // read by index: destructuring runs the array's iterator, a cost per call here
      pixel[0] = rgb[0];
      pixel[1] = rgb[1];
      pixel[2] = rgb[2];
      pixel[3] = 255;
      rgba = pixel32[0];
      last = v;
    }
    out[i] = rgba;
  }
}
