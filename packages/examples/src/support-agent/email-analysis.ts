/**
 * Reading a customer email with a real natural-language pipeline — wink-nlp with its English model
 * (wink-eng-lite-web-model: tokens, lemmas, named entities, sentiment), all in process, no network. The offline
 * model (offline-model.ts) decides from what this finds.
 * @module
 */
import winkNLP, { type ItsFunction } from 'wink-nlp';
import model from 'wink-eng-lite-web-model';
import type { Intent } from './inbox.js';

/** What the pipeline found in one email. */
export interface EmailAnalysis {
  readonly intent: Intent;
  /** Order numbers mentioned, in order of appearance, without repeats (`ORD-12345`). */
  readonly orderIds: readonly string[];
  /** Amounts of money mentioned (the MONEY entities), in cents, in order of appearance. */
  readonly amountsCents: readonly number[];
  /** wink's sentiment of the whole text, from -1 (very negative) to 1 (very positive). */
  readonly sentiment: number;
  /** The words that decided the intent (lemmas), for explanations. */
  readonly cues: readonly string[];
}

/** One pipeline per process: loading the model takes a few hundred ms, reading a document under one. */
let pipeline: ReturnType<typeof winkNLP> | undefined;

function nlp(): ReturnType<typeof winkNLP> {
  pipeline ??= winkNLP(model);
  return pipeline;
}

/**
 * Load the English model now rather than at the first email: loading takes a few hundred ms of CPU, which in a
 * worker would hold up everything else on its event loop (heartbeats included).
 */
export function loadEnglishModel(): void {
  nlp();
}

/** Lemmas that, with nothing more specific, make an email a complaint. */
const COMPLAINT_LEMMAS = new Set([
  'disappoint',
  'disappointed',
  'frustrate',
  'frustrated',
  'furious',
  'appal',
  'appalled',
  'terrible',
  'awful',
  'unacceptable',
  'useless',
  'disaster',
  'flimsy',
  'manager',
  'worst',
]);
/** Lemmas of asking where an order is. */
const WHERE_LEMMAS = new Set(['where', 'track', 'tracking', 'status']);
/** Lemmas of delivery, which count as asking where an order is when the email also asks when or whether yet. */
const DELIVERY_LEMMAS = new Set(['ship', 'arrive', 'deliver', 'delivery']);

/** The order numbers in `text`: `ORD-12345`, also written `ord 12345` or `#ORD-12345`. */
function orderIdsIn(text: string): string[] {
  const ids = [...text.matchAll(/\bORD[-\s]?(\d{5})\b/gi)].map((m) => `ORD-${m[1]}`);
  return [...new Set(ids)];
}

/** `$1,249.50`, `12.50 dollars`, `USD 80` → cents; undefined for a MONEY entity that is not in dollars. */
export function moneyToCents(value: string): number | undefined {
  if (!/\$|dollar|usd/i.test(value)) return undefined;
  const number = /(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?/.exec(value);
  if (!number?.[1]) return undefined;
  const whole = Number(number[1].replaceAll(',', ''));
  const cents = number[2] === undefined ? 0 : Number(number[2].padEnd(2, '0'));
  return whole * 100 + cents;
}

/**
 * Read an email (its subject and body, as one text): its intent, the order numbers and amounts it mentions, and its
 * sentiment. The intent is decided on lemmas, most specific first — cancelling (`cancel`), a refund (`refund`,
 * `reimburse`, money back, returning an item), where an order is (`where`, tracking, status; or shipping, arriving,
 * delivery asked about with `when` or `yet`), a complaint (words of anger or disappointment, or a sentiment of
 * -0.3 or below) — else `other`. Deterministic: the same text gives the same analysis.
 */
export function analyzeEmail(text: string): EmailAnalysis {
  const { its } = nlp();
  const doc = nlp().readDoc(text);
  /* eslint-disable @typescript-eslint/unbound-method -- wink's `its` helpers are passed by reference: its API */
  const normals = doc.tokens().out<string>(its.normal);
  // wink's typings declare `its.lemma` with the model's addons as its third parameter, which `out` does not
  // accept by type; it is passed them at run time.
  const lemmaOf = its.lemma as unknown as ItsFunction<string>;
  const lemmaList = doc.tokens().out<string>(lemmaOf);
  const sentiment = Number(doc.out<number>(its.sentiment));
  const entities = doc.entities().out<{ value: string; type: string }>(its.detail) as {
    value: string;
    type: string;
  }[];
  /* eslint-enable @typescript-eslint/unbound-method */
  // The second half of a hyphenated compound names a thing, not a request: "noise-cancelling headphones".
  const lemmas = lemmaList.map((l, i) => (normals[i - 1] === '-' ? `-${l}` : l));
  const has = (lemma: string): boolean => lemmas.includes(lemma);
  const present = (set: ReadonlySet<string>): string[] => [...new Set(lemmas.filter((l) => set.has(l)))];
  const amountsCents = entities
    .filter((e) => e.type === 'MONEY')
    .map((e) => moneyToCents(e.value))
    .filter((c): c is number => c !== undefined);

  let intent: Intent = 'other';
  let cues: string[] = [];
  const complaint = present(COMPLAINT_LEMMAS);
  if (has('cancel') || has('cancellation')) {
    intent = 'cancel';
    cues = ['cancel'];
  } else if (has('refund') || has('reimburse') || (has('money') && has('back')) || has('return')) {
    intent = 'refund';
    cues = ['refund', 'reimburse', 'money', 'return'].filter(has);
  } else if (
    present(WHERE_LEMMAS).length > 0 ||
    (present(DELIVERY_LEMMAS).length > 0 && (has('when') || has('yet')))
  ) {
    intent = 'where-is-my-order';
    cues = [...present(WHERE_LEMMAS), ...present(DELIVERY_LEMMAS)];
  } else if (complaint.length > 0 || sentiment <= -0.3) {
    intent = 'complaint';
    cues = complaint.length > 0 ? complaint : [`sentiment ${sentiment.toFixed(2)}`];
  }
  return { intent, orderIds: orderIdsIn(text), amountsCents, sentiment, cues };
}
