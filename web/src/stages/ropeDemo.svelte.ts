// The rotary view's demonstration (Rope.svelte): the key it compares with the focus query (null: the token
// before it), the positions m and n it puts the two at, and the shift s it moves both by. Kept outside the view so
// that the Llama-family lesson can show the very pair and shift its text quotes.
export const ropeDemo = $state<{ key: number | null; m: number; n: number; s: number }>({ key: null, m: 0, n: 0, s: 10 });
