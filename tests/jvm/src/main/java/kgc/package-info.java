/** kgc's Java test clients, run by the Python tests from tests/jvm/target/classes. */
package kgc;
