// @ts-check
/**
 * The tenant's custom fields of deals on the board's cards: which of them the cards show (the
 * user's choice in the page's "Card fields", kept in the tab's session storage), and each value
 * as text, read by the fields' definitions (`customFieldDefinitions`): a select's option by its
 * label, a date in the browser's language.
 */

import { graphql } from "./transport.js";

const STORED_CHOICE = "dealbase.board.fields";

export const DEFINITIONS = `query Definitions {
  customFieldDefinitions(record: DEAL) {
    name label type archived
    options { id label }
  }
}`;

/** @typedef {import("./transport.js").Credentials} Credentials */
/**
 * @typedef {{ name: string, label: string, type: string, archived: boolean,
 *   options: { id: string, label: string }[] | null }} Definition
 */
/** @typedef {{ deals: { customFields: Record<string, unknown> | null }[] }} Column */

const integers = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
// A date is a day of the calendar, not an instant: the day it names, in no time zone's terms.
const days = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeZone: "UTC" });
// A timestamp is an instant: shown in the browser's time zone.
const instants = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });

/** @returns {Set<string>} */
function storedChoice() {
  try {
    const names = JSON.parse(sessionStorage.getItem(STORED_CHOICE) ?? "[]");
    return new Set(Array.isArray(names) ? names.filter((name) => typeof name === "string") : []);
  } catch {
    return new Set(); // not written by this page: as if nothing were chosen
  }
}

/** @param {Set<string>} chosen */
function storeChoice(chosen) {
  if (chosen.size) sessionStorage.setItem(STORED_CHOICE, JSON.stringify([...chosen]));
  else sessionStorage.removeItem(STORED_CHOICE);
}

/** @param {Definition} definition @param {unknown} id */
function optionLabel(definition, id) {
  // An option defined since the definitions were read shows its id until they are read again.
  return definition.options?.find((option) => option.id === id)?.label ?? String(id);
}

/**
 * @param {Intl.DateTimeFormat} format
 * @param {string} iso
 * @param {unknown} value what the server sent, shown as it is if it is no date
 */
function dateText(format, iso, value) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(value) : format.format(date);
}

/**
 * A value as a card shows it; null for none (the card then has no line for it).
 * @param {Definition} definition
 * @param {unknown} value as customFields holds it (docs/graphql.md, "Custom fields")
 * @returns {string | null}
 */
export function valueText(definition, value) {
  if (value === null || value === undefined || value === "") return null;
  switch (definition.type) {
    case "BOOLEAN":
      return value ? "yes" : "no";
    case "INTEGER":
      return typeof value === "number" ? integers.format(value) : String(value);
    case "DATE":
      return dateText(days, `${value}T00:00:00Z`, value);
    case "TIMESTAMP":
      // Six fractional digits are more than ECMAScript's date format reads.
      return dateText(instants, String(value).replace(/(\.\d{3})\d+/, "$1"), value);
    case "SINGLE_SELECT":
      return optionLabel(definition, value);
    case "MULTI_SELECT":
      return Array.isArray(value) && value.length
        ? value.map((id) => optionLabel(definition, id)).join(", ")
        : null;
    default:
      // Text, an email address, a URL, and a decimal, a string kept exact (no float).
      return String(value);
  }
}

/**
 * What a card's value names that the definitions lack: its field (``name``), or a select's
 * option (``name:id``).
 * @param {Definition | undefined} definition
 * @param {string} name
 * @param {unknown} value
 * @returns {string[]}
 */
function unknownIn(definition, name, value) {
  if (!definition) return [name];
  if (!definition.options || value === null) return [];
  const options = definition.options;
  const ids = Array.isArray(value) ? value : [value];
  return ids
    .filter((id) => !options.some((option) => option.id === id))
    .map((id) => `${name}:${id}`);
}

/**
 * The fields a board's cards show and the list to choose them from: one for the page, read
 * again for each board shown.
 */
export class CardFields {
  /**
   * @param {HTMLDetailsElement} chooser the list's disclosure, hidden when there is no field
   * @param {HTMLElement} choices where the list's checkboxes go
   * @param {() => void} changed shows the board again, with the fields as chosen now
   */
  constructor(chooser, choices, changed) {
    this.chooser = chooser;
    this.choices = choices;
    this.changed = changed;
    /** Oldest first, archived ones included, as the server has them. @type {Definition[]} */
    this.definitions = [];
    this.chosen = storedChoice();
    /** The fields and options unknown to the definitions when they were last read for that. */
    this.askedFor = "";
    /** Counts the reads asked for: an answer to one asked before the last is dropped. */
    this.reads = 0;
    this.reading = false;
    /** The board last shown. @type {Column[]} */
    this.seen = [];
  }

  /**
   * Reads the definitions, then lists the fields to choose from and shows the board again.
   * @param {Credentials} credentials
   */
  async read(credentials) {
    const read = ++this.reads;
    this.reading = true;
    /** @type {Definition[] | null} */
    let definitions = null;
    try {
      definitions = (await graphql(credentials, DEFINITIONS)).customFieldDefinitions;
    } catch {
      // The cards show their own fields without these; a board that names a field these do
      // not know asks for them again.
    }
    if (read !== this.reads) return;
    this.reading = false;
    if (definitions) {
      this.definitions = definitions;
      this.list();
      this.changed();
    }
    // A board shown meanwhile may name a field defined after this read.
    this.notice(credentials, this.seen);
  }

  /** Hides the list and drops the definitions (another key's tenant may have others). */
  clear() {
    this.reads += 1;
    this.reading = false;
    this.seen = [];
    this.definitions = [];
    this.askedFor = "";
    this.choices.replaceChildren();
    this.chooser.hidden = true;
  }

  /** Forgets the choice too: the next key may be another tenant's, with other fields. */
  forget() {
    this.clear();
    this.chosen.clear();
    storeChoice(this.chosen);
  }

  /**
   * Reads the definitions again when the board shows a field or an option they do not have
   * (defined since they were read), once for each such set.
   * @param {Credentials} credentials
   * @param {Column[]} columns
   */
  notice(credentials, columns) {
    this.seen = columns;
    if (this.reading) return;
    const known = new Map(this.definitions.map((definition) => [definition.name, definition]));
    /** @type {Set<string>} */
    const unknown = new Set();
    for (const column of columns) {
      for (const deal of column.deals) {
        for (const [name, value] of Object.entries(deal.customFields ?? {})) {
          unknownIn(known.get(name), name, value).forEach((each) => unknown.add(each));
        }
      }
    }
    const asking = [...unknown].sort().join(" ");
    if (!asking || asking === this.askedFor) return;
    this.askedFor = asking;
    void this.read(credentials);
  }

  /** Lists the fields not archived, each a checkbox labelled by its label, checked if chosen. */
  list() {
    const focused = document.activeElement;
    const refocus =
      focused instanceof HTMLInputElement && this.choices.contains(focused) ? focused.value : null;
    const live = this.definitions.filter((definition) => !definition.archived);
    this.choices.replaceChildren(
      ...live.map((definition) => {
        const box = document.createElement("input");
        box.type = "checkbox";
        box.value = definition.name;
        box.checked = this.chosen.has(definition.name);
        box.addEventListener("change", () => {
          if (box.checked) this.chosen.add(definition.name);
          else this.chosen.delete(definition.name);
          storeChoice(this.chosen);
          this.changed();
        });
        const label = document.createElement("label");
        label.append(box, definition.label);
        return label;
      }),
    );
    this.chooser.hidden = live.length === 0;
    // A list read again while one of its checkboxes had the focus gives the focus back.
    if (refocus !== null) {
      [...this.choices.querySelectorAll("input")].find((box) => box.value === refocus)?.focus();
    }
  }

  /**
   * A card's chosen fields that hold a value, each its label and its value, in the
   * definitions' order; null when none does.
   * @param {Record<string, unknown> | null} values the deal's customFields
   * @returns {HTMLElement | null}
   */
  shownOf(values) {
    if (!values || this.chosen.size === 0) return null;
    const rows = [];
    for (const definition of this.definitions) {
      if (!this.chosen.has(definition.name) || !Object.hasOwn(values, definition.name)) continue;
      const text = valueText(definition, values[definition.name]);
      if (text === null) continue;
      const term = document.createElement("dt");
      term.textContent = definition.label;
      const detail = document.createElement("dd");
      detail.textContent = text;
      const row = document.createElement("div");
      row.append(term, detail);
      rows.push(row);
    }
    if (rows.length === 0) return null;
    const shown = document.createElement("dl");
    shown.className = "fields";
    shown.append(...rows);
    return shown;
  }
}
