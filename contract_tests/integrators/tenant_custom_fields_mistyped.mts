// The same customer's custom fields set with values of the wrong types: `tsc --strict` must
// refuse each line marked `refused:`, and no other, as the tenant's own document types them.
import type { components } from "./schema.js";

type CustomerFields = components["schemas"]["CustomerFields"];

export const body: CustomerFields = {
  last_name: "Lovelace",
  custom_fields: {
    seats: "12", // refused: a number, not text
    revenue: "1234.50",
    vip: true,
    renewal: "2027-06-30",
    tier: "gold", // refused: an option's id, not its label
  },
};
