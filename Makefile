# Thin aliases for dev.py, which needs nothing but Python.
.PHONY: run test test-unit check openapi bench
run:
	python3 dev.py run
test:
	python3 dev.py test
test-unit:
	python3 dev.py test-unit
check:
	python3 dev.py check
openapi:
	python3 dev.py openapi
