// The texts every lesson's claims are checked on: prose, a question the model can answer, repetition (which
// small models predict well), code, numbers, names, a single word, a line of Chinese, emoji, a long paragraph.
// A lesson that chooses its examples from the data must find them, or say it did not, on every one.
export const TEXTS: readonly string[] = [
  "Data visualization empowers users to",
  "The capital of France is Paris, and the capital of Germany is",
  "Once upon a time, in a small village by the sea, there lived a",
  "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
  "The quick brown fox jumps over the lazy dog",
  "one two three four five six seven eight nine ten one two three four five six seven eight nine",
  "Alice gave the book to Bob because Bob had asked Alice for the book. Then Bob gave it back to",
  "Hello",
  "1, 2, 3, 4, 5, 6, 7, 8,",
  "In 1969, Neil Armstrong became the first person to walk on the",
  "Tokenization splits uncommonly long words into subword pieces",
  "人工智能正在改变世界",
  "I love pizza 🍕 and ice cream!",
  "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
  "Water boils at 100 degrees Celsius at sea level, but at high altitude it boils at a lower",
  "She opened the door, looked outside, and saw that it was raining, so she went back in to get her",
  "import numpy as np\nx = np.arange(10)\nprint(x.",
  "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly",
  "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and arrows of",
  "The history of the Roman Empire spans many centuries. It began when Augustus became the first emperor, and " +
    "over the following hundreds of years the empire grew to include lands around the Mediterranean Sea, from " +
    "Spain in the west to Syria in the east, before it was divided and the western half finally fell in the year",
];
