"""MLCommons LoadGen over our endpoint: a streaming SUT, a synthetic dataset, reports."""
