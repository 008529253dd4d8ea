/**
 * The currencies an invoice batch may use, with their ISO 4217 minor units: amounts are stored and charged as
 * integers of the minor unit (cents, pence, yen, fils), never as fractions.
 */
export const CURRENCIES = Object.freeze({
  USD: { minorUnits: 2, name: 'US dollar' },
  EUR: { minorUnits: 2, name: 'euro' },
  GBP: { minorUnits: 2, name: 'pound sterling' },
  CHF: { minorUnits: 2, name: 'Swiss franc' },
  SEK: { minorUnits: 2, name: 'Swedish krona' },
  JPY: { minorUnits: 0, name: 'yen' },
  KWD: { minorUnits: 3, name: 'Kuwaiti dinar' },
} as const);

export type CurrencyCode = keyof typeof CURRENCIES;

export const CURRENCY_CODES = Object.freeze(Object.keys(CURRENCIES) as CurrencyCode[]);

export function isCurrencyCode(code: string): code is CurrencyCode {
  return Object.hasOwn(CURRENCIES, code);
}

/** `amountMinor` in major units with the currency's decimals, e.g. `1234567 EUR` → `EUR 12,345.67`. */
export function formatMoney(amountMinor: number | bigint, currency: CurrencyCode): string {
  const minorUnits = CURRENCIES[currency].minorUnits;
  const value = BigInt(amountMinor);
  const negative = value < 0n;
  const digits = (negative ? -value : value).toString().padStart(minorUnits + 1, '0');
  const whole = digits.slice(0, digits.length - minorUnits).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const fraction = minorUnits > 0 ? `.${digits.slice(digits.length - minorUnits)}` : '';
  return `${currency} ${negative ? '-' : ''}${whole}${fraction}`;
}
