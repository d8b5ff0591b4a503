"""Pure domain: generations, records, errors and the clock. No I/O here."""
