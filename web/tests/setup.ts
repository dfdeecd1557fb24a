// Every catalogue loaded before the tests, as the page has a language's once the learner has picked it
// (src/lib/i18n.ts loads all but English on first use): the tests read every language's strings.
import { LANGS, loadLanguage } from "../src/lib/i18n";

await Promise.all(LANGS.map(loadLanguage));
